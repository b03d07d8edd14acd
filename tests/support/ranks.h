// Data-parallel trainer jobs on this machine, over Gloo: N rank processes started either by
// PyTorch's own launcher (python -m torch.distributed.run --standalone --no-python) or here, with
// the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), for when the venv's Python is not there and for per-rank differences.
#pragma once
#include <dirent.h>
#include <unistd.h>

#include <memory>
#include <string>
#include <vector>

#include "test_support.h"

namespace u3d::test {

// Rank processes started here; rank r gets `args` plus `rank_args[r]` (when given) and `env` plus
// `rank_env[r]`. Each rank's output goes to <cwd>/rank<r>-<port>.out.
inline std::vector<std::unique_ptr<TrainerProcess>> spawn_ranks(
    int world, const std::vector<std::string>& args, const fs::path& cwd,
    const std::map<std::string, std::string>& env = {}, const std::vector<std::vector<std::string>>& rank_args = {},
    const std::vector<std::map<std::string, std::string>>& rank_env = {}, fs::path program = {}) {
  const int port = free_tcp_port();
  std::vector<std::unique_ptr<TrainerProcess>> out;
  for (int r = 0; r < world; ++r) {
    ProcessOptions o;
    o.program = program;
    o.env = env;
    o.env["RANK"] = std::to_string(r);
    o.env["LOCAL_RANK"] = std::to_string(r);
    o.env["WORLD_SIZE"] = std::to_string(world);
    o.env["LOCAL_WORLD_SIZE"] = std::to_string(world);
    o.env["MASTER_ADDR"] = "127.0.0.1";
    o.env["MASTER_PORT"] = std::to_string(port);
    if (static_cast<size_t>(r) < rank_env.size()) {
      for (const auto& [k, v] : rank_env[static_cast<size_t>(r)]) o.env[k] = v;
    }
    o.log = cwd / ("rank" + std::to_string(r) + "-" + std::to_string(port) + ".out");
    std::vector<std::string> a = args;
    if (static_cast<size_t>(r) < rank_args.size()) {
      a.insert(a.end(), rank_args[static_cast<size_t>(r)].begin(), rank_args[static_cast<size_t>(r)].end());
    }
    out.push_back(std::make_unique<TrainerProcess>(a, cwd, o));
  }
  return out;
}

// torch.distributed.run with `world` trainer workers (null when the venv's Python is missing).
// `launcher_args` go before --no-python (e.g. --max-restarts=1).
inline std::unique_ptr<TrainerProcess> torchrun(int world, const std::vector<std::string>& args, const fs::path& cwd,
                                                const std::vector<std::string>& launcher_args = {},
                                                const std::map<std::string, std::string>& env = {}) {
  const auto python = torch_python();
  if (!python) return nullptr;
  std::vector<std::string> a = {"-m", "torch.distributed.run", "--standalone",
                                "--nproc-per-node=" + std::to_string(world)};
  a.insert(a.end(), launcher_args.begin(), launcher_args.end());
  a.push_back("--no-python");
  a.push_back(trainer_path().string());
  a.insert(a.end(), args.begin(), args.end());
  ProcessOptions o;
  o.program = *python;
  o.env = env;
  o.env["OMP_NUM_THREADS"] = "1";  // torchrun's own default, set quietly
  return std::make_unique<TrainerProcess>(a, cwd, o);
}

// Every exit code of `ranks` (each waited for at most `timeout_seconds`).
inline std::vector<int> wait_all(std::vector<std::unique_ptr<TrainerProcess>>& ranks, double timeout_seconds = 300) {
  std::vector<int> codes;
  for (auto& r : ranks) codes.push_back(r->wait(timeout_seconds));
  return codes;
}

inline std::string outputs(std::vector<std::unique_ptr<TrainerProcess>>& ranks) {
  std::string s;
  for (size_t r = 0; r < ranks.size(); ++r) s += "--- rank " + std::to_string(r) + " ---\n" + ranks[r]->output();
  return s;
}

// The trainer processes whose command line contains `needle` (torchrun's workers).
inline std::vector<int> trainer_pids_with(const std::string& needle) {
  std::vector<int> pids;
  const std::string trainer = fs::weakly_canonical(trainer_path()).string();
  for (const auto& e : fs::directory_iterator("/proc")) {
    const std::string name = e.path().filename().string();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::error_code ec;
    const auto exe = fs::read_symlink(e.path() / "exe", ec);
    if (ec || exe.string() != trainer) continue;
    std::string cmdline = read_text(e.path() / "cmdline");
    for (char& c : cmdline) {
      if (c == '\0') c = ' ';
    }
    if (cmdline.find(needle) != std::string::npos) pids.push_back(std::stoi(name));
  }
  return pids;
}

}  // namespace u3d::test
