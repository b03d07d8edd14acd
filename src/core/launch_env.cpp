#include "u3d/core/launch_env.h"

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <optional>

#include "u3d/core/errors.h"
#include "u3d/core/json.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

std::optional<std::string> env(const char* name) {
  const char* v = std::getenv(name);
  if (!v || !*v) return std::nullopt;
  return std::string(v);
}

// The variable as an integer in [low, high]; nullopt when unset.
std::optional<int64_t> env_int(const char* name, int64_t low, int64_t high) {
  const auto text = env(name);
  if (!text) return std::nullopt;
  const auto value = parse_int(*text);
  if (!value || *value < low || *value > high) {
    throw ConfigError(fmt::format("environment: {}='{}': expected an integer in {}..{}", name, *text, low, high));
  }
  return value;
}

constexpr int64_t kMaxRanks = 1 << 20;

// SLURM_STEP_TASKS_PER_NODE "4(x2),3" -> 4: the tasks on the first node (srun puts rank 0 there).
std::optional<int64_t> slurm_tasks_per_node() {
  for (const char* name : {"SLURM_NTASKS_PER_NODE", "SLURM_STEP_TASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
    const auto text = env(name);
    if (!text) continue;
    const std::string first = text->substr(0, text->find_first_of("(,"));
    if (const auto n = parse_int(first); n && *n > 0) return n;
  }
  return std::nullopt;
}

}  // namespace

std::string LaunchEnv::describe() const {
  if (!launched) return "a single process";
  return fmt::format("rank {} of {} (local rank {}, {})", rank, world_size, local_rank, launcher);
}

std::string first_slurm_host(const std::string& nodelist) {
  // The first entry: up to a comma outside brackets.
  size_t end = 0;
  int depth = 0;
  for (; end < nodelist.size(); ++end) {
    const char c = nodelist[end];
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (c == ',' && depth == 0) break;
  }
  const std::string entry = nodelist.substr(0, end);
  const size_t open = entry.find('[');
  if (open == std::string::npos) return entry;
  // "gpu[07-09,12]": the prefix and the first number of the range, zero padding kept.
  const std::string range = entry.substr(open + 1);
  const size_t stop = range.find_first_of("-,]");
  return entry.substr(0, open) + range.substr(0, stop);
}

LaunchEnv read_launch_env() {
  LaunchEnv e;
  const auto world = env_int("WORLD_SIZE", 1, kMaxRanks);
  // torchrun sets RANK and WORLD_SIZE together: one without the other (outside an srun step, which
  // has its own) is a launch mistake, not one plain process that silently trains alone.
  if (world.has_value() != env("RANK").has_value() && (!world || *world > 1) && !env("SLURM_STEP_ID")) {
    throw ConfigError(fmt::format(
        "environment: {} is set but {} is not; a data-parallel rank needs both (torchrun "
        "sets them), one process neither",
        world ? "WORLD_SIZE=" + std::to_string(*world) : "RANK=" + *env("RANK"), world ? "RANK" : "WORLD_SIZE"));
  }
  if (world && env("RANK")) {
    e.launched = true;
    e.launcher = "torchrun";
    e.world_size = *world;
    e.rank = *env_int("RANK", 0, e.world_size - 1);
    e.local_world_size = env_int("LOCAL_WORLD_SIZE", 1, e.world_size).value_or(e.world_size);
    e.local_rank = env_int("LOCAL_RANK", 0, e.local_world_size - 1).value_or(e.rank % e.local_world_size);
    e.store_host = env("MASTER_ADDR").value_or("127.0.0.1");
    e.store_port = env_int("MASTER_PORT", 1, 65535).value_or(29500);
    e.agent_store = to_lower(env("TORCHELASTIC_USE_AGENT_STORE").value_or("")) == "true";
    e.restart_count = env_int("TORCHELASTIC_RESTART_COUNT", 0, 1 << 30).value_or(0);
    e.error_file = env("TORCHELASTIC_ERROR_FILE").value_or("");
    return e;
  }
  if (env("SLURM_STEP_ID") && env("SLURM_PROCID") && env("SLURM_NTASKS")) {
    e.launched = true;
    e.launcher = "slurm";
    e.world_size = *env_int("SLURM_NTASKS", 1, kMaxRanks);
    e.rank = *env_int("SLURM_PROCID", 0, e.world_size - 1);
    e.local_world_size = std::min(e.world_size, slurm_tasks_per_node().value_or(1));
    e.local_rank = env_int("SLURM_LOCALID", 0, kMaxRanks).value_or(0);
    if (e.local_rank >= e.local_world_size) e.local_world_size = e.local_rank + 1;
    if (const auto host = env("MASTER_ADDR")) {
      e.store_host = *host;
    } else {
      const auto nodes = env("SLURM_STEP_NODELIST") ? env("SLURM_STEP_NODELIST") : env("SLURM_JOB_NODELIST");
      if (!nodes)
        throw ConfigError("environment: srun without SLURM_STEP_NODELIST or SLURM_JOB_NODELIST; set MASTER_ADDR");
      e.store_host = first_slurm_host(*nodes);
    }
    const int64_t job = env_int("SLURM_JOB_ID", 0, INT64_MAX).value_or(0);
    e.store_port = env_int("MASTER_PORT", 1, 65535).value_or(20000 + job % 20000);
    return e;
  }
  return e;
}

const LaunchEnv& launch_env() {
  static const LaunchEnv e = read_launch_env();
  return e;
}

void write_launcher_error_file(const std::string& message) {
  const char* path = std::getenv("TORCHELASTIC_ERROR_FILE");
  if (!path || !*path) return;
  const auto now =
      std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch());
  const Json error = {
      {"message",
       {{"message", message},
        {"extraInfo", {{"py_callstack", "trainer (C++): " + message}, {"timestamp", std::to_string(now.count())}}}}}};
  const std::string json = json_line(error);
  // torchrun reads the file after the process ended: a plain write is enough.
  if (std::FILE* f = std::fopen(path, "w")) {
    std::fputs(json.c_str(), f);
    std::fclose(f);
  }
}

}  // namespace u3d
