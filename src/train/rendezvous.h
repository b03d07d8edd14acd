// The start-up of a data-parallel job before its process group (private to src/train, for
// distributed.cpp): the rendezvous store and the roll call of the ranks in it. Each failure is one
// line in our words (no c10d text, no C++ stack trace), within training.dist_timeout_s:
//
//   nothing answers at MASTER_ADDR:MASTER_PORT          DistributedError "cannot reach the store"
//   a program there that is not a store (it accepts a   DistributedError "... is not a rendezvous store"
//     connection and never answers, or answers garbage)
//   rank 0 cannot host the store: the port is taken     DistributedError naming what holds it
//   ranks started with different world sizes            ConfigError naming the ranks and the values
//   two processes started as one rank                   ConfigError naming the rank
//   a rank that never joined                            DistributedError naming the rank(s)
#pragma once
#include <torch/csrc/distributed/c10d/Store.hpp>

#include <chrono>
#include <functional>

#include "u3d/core/launch_env.h"

namespace u3d::rendezvous_detail {

using Clock = std::chrono::steady_clock;

// Runs `work` on a thread of its own and waits for it until `deadline`: false when the deadline
// passed (the thread, blocked in a store or socket call with no timeout of its own, stays detached
// until the process ends: `work` must own what it uses). Rethrows what `work` threw.
bool finishes_by(Clock::time_point deadline, std::function<void()> work);

// c10d's own log lines ("[c10d] The client socket has failed to connect ...", with C++ stack
// traces) are silenced for the rest of the process, unless TORCH_CPP_LOG_LEVEL asks for them.
void quiet_c10d_logs();

// The job's TCPStore, connected before `deadline`: rank 0 hosts it (srun, spawned ranks) unless
// torchrun's agent does (every rank a client). `timeout_s` is training.dist_timeout_s (messages).
c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env, Clock::time_point deadline, double timeout_s);

// Every rank checks in with its rank and world size and waits (until `deadline`) for the others:
// returns when ranks 0 .. world_size - 1 are all there and agree. A store that stops answering
// (its host hangs) is a DistributedError a few seconds after `deadline`.
void check_in(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& env, Clock::time_point deadline,
              double timeout_s);

}  // namespace u3d::rendezvous_detail
