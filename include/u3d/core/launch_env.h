// Who launched this process, read from the environment once: torchrun, Slurm's srun, or nobody.
//
//   torchrun --nproc-per-node=8 --no-python trainer --config exp.yaml
//     RANK, LOCAL_RANK, WORLD_SIZE, LOCAL_WORLD_SIZE, MASTER_ADDR, MASTER_PORT; the agent hosts the
//     TCPStore (TORCHELASTIC_USE_AGENT_STORE=True: every worker is a client), restarts count in
//     TORCHELASTIC_RESTART_COUNT, an uncaught error goes to TORCHELASTIC_ERROR_FILE.
//   srun trainer --config exp.yaml        (inside a job step: SLURM_STEP_ID is set)
//     SLURM_PROCID, SLURM_NTASKS, SLURM_LOCALID, SLURM_NTASKS_PER_NODE / SLURM_STEP_TASKS_PER_NODE;
//     the store on the job's first node (SLURM_STEP_NODELIST, else SLURM_JOB_NODELIST; MASTER_ADDR
//     wins), port MASTER_PORT or 20000 + SLURM_JOB_ID mod 20000; rank 0 hosts it.
//   neither: one process, `launched` false.
//
// A Slurm batch script that runs `trainer` without srun has SLURM_NTASKS but no job step: one
// process, as a plain run.
#pragma once
#include <cstdint>
#include <string>

namespace u3d {

struct LaunchEnv {
  bool launched = false;         // by torchrun or srun (a process group is made, also for world size 1)
  std::string launcher;          // "torchrun", "slurm", or "" (a plain run)
  int64_t rank = 0;              // global rank, 0 .. world_size - 1
  int64_t local_rank = 0;        // rank on this node: the process binds cuda:local_rank
  int64_t world_size = 1;        // processes in the job
  int64_t local_world_size = 1;  // processes on this node (host threads are shared among them)
  std::string store_host = "127.0.0.1";
  int64_t store_port = 29500;
  bool agent_store = false;   // torchrun's agent hosts the store: rank 0 is a client too
  int64_t restart_count = 0;  // TORCHELASTIC_RESTART_COUNT: > 0 after torchrun restarted the workers
  std::string error_file;     // TORCHELASTIC_ERROR_FILE, or ""

  bool is_main() const { return rank == 0; }
  // "rank 1 of 2 (local 1, torchrun)" for messages.
  std::string describe() const;
};

// Reads the variables above. ConfigError (exit 2) naming the variable when one is set but not a
// number in range (RANK=abc, LOCAL_RANK >= LOCAL_WORLD_SIZE, ...), or when RANK or WORLD_SIZE > 1
// is set without the other outside an srun step.
LaunchEnv read_launch_env();
// The environment as read once per process (read_launch_env() on the first call).
const LaunchEnv& launch_env();

// The first host name of a Slurm node list: "gpu[07-09,12],cpu1" -> "gpu07".
std::string first_slurm_host(const std::string& nodelist);

// Under torchrun: writes `message` to TORCHELASTIC_ERROR_FILE in the format torchrun's agent reads
// ({"message": {"message": ..., "extraInfo": {"py_callstack": ..., "timestamp": ...}}}), so the
// agent's failure summary names this rank's error. Nothing without the variable; never throws.
void write_launcher_error_file(const std::string& message);

}  // namespace u3d
