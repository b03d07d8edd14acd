// Data-parallel trainer jobs on this machine, over Gloo: N rank processes started either by
// PyTorch's own launcher (python -m torch.distributed.run --standalone --no-python) or here, with
// the variables torchrun sets (RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT), for when the venv's Python is not there and for per-rank differences, or with the
// variables Slurm's srun sets.
#pragma once
#include <dirent.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "test_support.h"

namespace u3d::test {

// Rank processes started here, rank r with `args` plus `rank_args[r]` (when given) and `env` plus
// `launcher_env(r)` plus `rank_env[r]`; each rank's output goes to <cwd>/rank<r>-<tag>.out.
inline std::vector<std::unique_ptr<TrainerProcess>> start_ranks(
    int world, const std::vector<std::string>& args, const fs::path& cwd, const std::string& tag,
    const std::function<std::map<std::string, std::string>(int)>& launcher_env,
    const std::map<std::string, std::string>& env, const std::vector<std::vector<std::string>>& rank_args,
    const std::vector<std::map<std::string, std::string>>& rank_env, const fs::path& program) {
  std::vector<std::unique_ptr<TrainerProcess>> out;
  for (int r = 0; r < world; ++r) {
    ProcessOptions o;
    o.program = program;
    o.env = env;
    for (const auto& [k, v] : launcher_env(r)) o.env[k] = v;
    if (static_cast<size_t>(r) < rank_env.size()) {
      for (const auto& [k, v] : rank_env[static_cast<size_t>(r)]) o.env[k] = v;
    }
    o.log = cwd / ("rank" + std::to_string(r) + "-" + tag + ".out");
    std::vector<std::string> a = args;
    if (static_cast<size_t>(r) < rank_args.size()) {
      a.insert(a.end(), rank_args[static_cast<size_t>(r)].begin(), rank_args[static_cast<size_t>(r)].end());
    }
    out.push_back(std::make_unique<TrainerProcess>(a, cwd, o));
  }
  return out;
}

// The variables torchrun sets for rank `r` of `world` ranks on this node, the store at 127.0.0.1:`port`.
inline std::map<std::string, std::string> torchrun_variables(int r, int world, int port) {
  return {{"RANK", std::to_string(r)},           {"LOCAL_RANK", std::to_string(r)},
          {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_WORLD_SIZE", std::to_string(world)},
          {"MASTER_ADDR", "127.0.0.1"},          {"MASTER_PORT", std::to_string(port)}};
}

// Ranks with the variables torchrun sets; see start_ranks for the rest.
inline std::vector<std::unique_ptr<TrainerProcess>> spawn_ranks(
    int world, const std::vector<std::string>& args, const fs::path& cwd,
    const std::map<std::string, std::string>& env = {}, const std::vector<std::vector<std::string>>& rank_args = {},
    const std::vector<std::map<std::string, std::string>>& rank_env = {}, fs::path program = {}) {
  const int port = free_tcp_port();
  const auto torchrun_env = [&](int r) { return torchrun_variables(r, world, port); };
  return start_ranks(world, args, cwd, std::to_string(port), torchrun_env, env, rank_args, rank_env, program);
}

// Only the ranks `which` of a job of `world` ranks (the others never start), with torchrun's
// variables and the store at 127.0.0.1:`port`; `rank_env[i]` is added to rank which[i]'s. Rank
// which[i]'s output goes to <cwd>/rank0-r<which[i]>-<port>.out.
inline std::vector<std::unique_ptr<TrainerProcess>> spawn_some_ranks(
    int world, const std::vector<int>& which, int port, const std::vector<std::string>& args, const fs::path& cwd,
    const std::vector<std::map<std::string, std::string>>& rank_env = {}) {
  std::vector<std::unique_ptr<TrainerProcess>> out;
  for (size_t i = 0; i < which.size(); ++i) {
    auto env = torchrun_variables(which[i], world, port);
    if (i < rank_env.size()) {
      for (const auto& [k, v] : rank_env[i]) env[k] = v;
    }
    const std::string tag = "r" + std::to_string(which[i]) + "-" + std::to_string(port);
    auto one = start_ranks(/*world=*/1, args, cwd, tag, [&](int) { return env; }, {}, {}, {}, {});
    out.push_back(std::move(one[0]));
  }
  return out;
}

// A program that is not a rendezvous store holding a port: a plain TCP listener on every address
// of this machine. It accepts nothing and says nothing (the kernel still completes a client's
// connection into its backlog), as a stuck or unrelated server would. Closed when destroyed.
class SilentListener {
 public:
  SilentListener() {
    fd_ = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_ANY);
    socklen_t len = sizeof(addr);
    if (fd_ >= 0 && ::bind(fd_, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 && ::listen(fd_, 64) == 0 &&
        ::getsockname(fd_, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
      port_ = ntohs(addr.sin_port);
    }
  }
  ~SilentListener() {
    if (fd_ >= 0) ::close(fd_);
  }
  SilentListener(const SilentListener&) = delete;
  SilentListener& operator=(const SilentListener&) = delete;
  int port() const { return port_; }  // 0 when the listener could not be made

 private:
  int fd_ = -1;
  int port_ = 0;
};

// Ranks with the variables `srun --ntasks=<world>` sets inside a job step on this one node
// (SLURM_STEP_ID, SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_STEP_TASKS_PER_NODE, the node
// list "localhost" and a SLURM_JOB_ID whose derived store port 20000 + id mod 20000 is free), with
// torchrun's variables and MASTER_ADDR/MASTER_PORT blanked (empty reads as unset). Rank 0 hosts the
// store. Empty when no free port in 20000..39999 was found.
inline std::vector<std::unique_ptr<TrainerProcess>> spawn_srun_ranks(int world, const std::vector<std::string>& args,
                                                                     const fs::path& cwd) {
  int port = 0;
  for (int attempt = 0; attempt < 200 && (port < 20000 || port >= 40000); ++attempt) port = free_tcp_port();
  if (port < 20000 || port >= 40000) return {};
  const std::string job = std::to_string(4'000'000 + port - 20000);  // 4000000 mod 20000 == 0
  const auto srun_env = [&](int r) -> std::map<std::string, std::string> {
    std::map<std::string, std::string> e = {{"SLURM_JOB_ID", job},
                                            {"SLURM_STEP_ID", "0"},
                                            {"SLURM_PROCID", std::to_string(r)},
                                            {"SLURM_LOCALID", std::to_string(r)},
                                            {"SLURM_NTASKS", std::to_string(world)},
                                            {"SLURM_STEP_TASKS_PER_NODE", std::to_string(world)},
                                            {"SLURM_STEP_NODELIST", "localhost"},
                                            {"SLURM_JOB_NODELIST", "localhost"}};
    for (const char* unset : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
                              "TORCHELASTIC_USE_AGENT_STORE", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE"}) {
      e[unset] = "";
    }
    return e;
  };
  return start_ranks(world, args, cwd, "srun-" + std::to_string(port), srun_env, {}, {}, {}, {});
}

// python -m torch.distributed.run `launcher_args` --no-python trainer `args` (null when the venv's
// Python is missing).
inline std::unique_ptr<TrainerProcess> torch_run(const std::vector<std::string>& launcher_args,
                                                 const std::vector<std::string>& args, const fs::path& cwd,
                                                 const std::map<std::string, std::string>& env = {}) {
  const auto python = torch_python();
  if (!python) return nullptr;
  std::vector<std::string> a = {"-m", "torch.distributed.run"};
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

// torch.distributed.run --standalone with `world` trainer workers on this node (null when the
// venv's Python is missing). `launcher_args` go before --no-python (e.g. --max-restarts=1).
inline std::unique_ptr<TrainerProcess> torchrun(int world, const std::vector<std::string>& args, const fs::path& cwd,
                                                const std::vector<std::string>& launcher_args = {},
                                                const std::map<std::string, std::string>& env = {}) {
  std::vector<std::string> a = {"--standalone", "--nproc-per-node=" + std::to_string(world)};
  a.insert(a.end(), launcher_args.begin(), launcher_args.end());
  return torch_run(a, args, cwd, env);
}

// `nodes` torchrun agents on this machine standing for `nodes` nodes of one job (torchrun
// --nnodes=<nodes> --nproc-per-node=1 with the c10d rendezvous at 127.0.0.1): global ranks
// 0 .. nodes - 1, each the only rank (local rank 0) of its node. Empty when the venv's Python is
// missing.
inline std::vector<std::unique_ptr<TrainerProcess>> torchrun_nodes(int nodes, const std::vector<std::string>& args,
                                                                   const fs::path& cwd) {
  const std::vector<std::string> a = {"--nnodes=" + std::to_string(nodes), "--nproc-per-node=1", "--rdzv-backend=c10d",
                                      "--rdzv-endpoint=127.0.0.1:" + std::to_string(free_tcp_port()),
                                      "--rdzv-id=u3d-test"};
  std::vector<std::unique_ptr<TrainerProcess>> out;
  for (int n = 0; n < nodes; ++n) {
    auto agent = torch_run(a, args, cwd);
    if (!agent) return {};
    out.push_back(std::move(agent));
  }
  return out;
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
