#include "rendezvous.h"

#include <fmt/ranges.h>
#include <netdb.h>
#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/socket.h>
#include <unistd.h>

#include <c10/util/Logging.h>
#include <torch/csrc/distributed/c10d/exception.h>
#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include "u3d/core/errors.h"
#include "u3d/core/text.h"

namespace u3d::rendezvous_detail {
namespace {

std::chrono::milliseconds until(Clock::time_point deadline) {
  const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - Clock::now());
  return std::max(left, std::chrono::milliseconds(1));
}

// The TCPStore made on a thread of its own, waited for until `deadline`: a listener that accepts
// and never answers leaves c10d's constructor waiting for ever (its first query has no timeout).
// Null when the deadline passed.
c10::intrusive_ptr<c10d::Store> store_within(const std::string& host, const c10d::TCPStoreOptions& options,
                                             Clock::time_point deadline) {
  auto store = std::make_shared<c10::intrusive_ptr<c10d::Store>>();
  if (!finishes_by(deadline, [store, host, options] { *store = c10::make_intrusive<c10d::TCPStore>(host, options); })) {
    return {};
  }
  return *store;
}

// Whether something at host:port accepts a TCP connection within `wait` (a bare connect, no bytes).
bool accepts_connections(const std::string& host, int64_t port, std::chrono::milliseconds wait) {
  addrinfo hints{};
  hints.ai_family = AF_UNSPEC;
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), std::to_string(port).c_str(), &hints, &found) != 0) return false;
  bool accepted = false;
  for (addrinfo* a = found; a && !accepted; a = a->ai_next) {
    const int fd = ::socket(a->ai_family, a->ai_socktype | SOCK_NONBLOCK | SOCK_CLOEXEC, a->ai_protocol);
    if (fd < 0) continue;
    if (::connect(fd, a->ai_addr, a->ai_addrlen) == 0) {
      accepted = true;
    } else if (errno == EINPROGRESS) {
      pollfd p{fd, POLLOUT, 0};
      int error = 0;
      socklen_t size = sizeof(error);
      accepted = ::poll(&p, 1, static_cast<int>(wait.count())) == 1 &&
                 ::getsockopt(fd, SOL_SOCKET, SO_ERROR, &error, &size) == 0 && error == 0;
    }
    ::close(fd);
  }
  ::freeaddrinfo(found);
  return accepted;
}

bool resolves(const std::string& host) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  addrinfo* found = nullptr;
  if (::getaddrinfo(host.c_str(), nullptr, &hints, &found) != 0) return false;
  ::freeaddrinfo(found);
  return true;
}

// The variables that set the store's address, the rank and the world size, for messages.
struct Names {
  const char* address;
  const char* rank;
  const char* world;
};
Names names(const LaunchEnv& env) {
  if (env.launcher == "slurm") return {"MASTER_ADDR/MASTER_PORT", "SLURM_PROCID", "SLURM_NTASKS"};
  return {"MASTER_ADDR:MASTER_PORT", "RANK", "WORLD_SIZE"};
}

std::vector<uint8_t> bytes(const std::string& s) { return {s.begin(), s.end()}; }
std::string text(const std::vector<uint8_t>& b) { return {b.begin(), b.end()}; }

}  // namespace

bool finishes_by(Clock::time_point deadline, std::function<void()> work) {
  struct Pending {
    std::mutex mutex;
    std::condition_variable done_cv;
    bool done = false;
    std::exception_ptr error;
  };
  auto pending = std::make_shared<Pending>();
  std::thread([pending, work = std::move(work)] {
    std::exception_ptr error;
    try {
      work();
    } catch (...) {
      error = std::current_exception();
    }
    const std::lock_guard<std::mutex> lock(pending->mutex);
    pending->error = error;
    pending->done = true;
    pending->done_cv.notify_all();
  }).detach();
  std::unique_lock<std::mutex> lock(pending->mutex);
  if (!pending->done_cv.wait_until(lock, deadline, [&] { return pending->done; })) return false;
  if (pending->error) std::rethrow_exception(pending->error);
  return true;
}

void quiet_c10d_logs() {
  const char* wanted = std::getenv("TORCH_CPP_LOG_LEVEL");
  if (wanted && *wanted) return;                                 // the user debugs c10d
  FLAGS_caffe2_log_level = std::max(FLAGS_caffe2_log_level, 3);  // above ERROR: c10d's lines off
}

c10::intrusive_ptr<c10d::Store> connect_store(const LaunchEnv& env, Clock::time_point deadline, double timeout_s) {
  const std::string where = fmt::format("{}:{}", env.store_host, env.store_port);
  const Names n = names(env);
  if (!resolves(env.store_host)) {
    throw ConfigError(
        fmt::format("environment: {}: the rendezvous store's host '{}' ({}) does not resolve to an "
                    "address; expected the host name or address of rank 0's node",
                    env.describe(), env.store_host, n.address));
  }
  c10d::TCPStoreOptions o;
  o.port = static_cast<uint16_t>(env.store_port);
  o.isServer = env.rank == 0 && !env.agent_store;
  o.numWorkers = env.agent_store ? std::nullopt : std::optional<size_t>(static_cast<size_t>(env.world_size));
  o.waitWorkers = false;
  o.timeout = until(deadline);
  if (o.isServer) {
    try {
      if (auto store = store_within(env.store_host, o, deadline)) return store;
    } catch (const std::exception& e) {
      spdlog::debug("c10d: {}", error_line(e));
    }
    // The port is taken (or the store did not start in time): say by what.
    o.isServer = false;
    o.timeout = std::chrono::seconds(2);
    bool store_there = false;
    try {
      store_there = store_within(env.store_host, o, std::min(deadline, Clock::now() + std::chrono::seconds(3)));
    } catch (const std::exception&) {
    }
    const std::string holder = store_there ? "another job's rendezvous store (or a second rank 0) already listens there"
                               : accepts_connections(env.store_host, env.store_port, std::chrono::seconds(1))
                                   ? "another program, which is not a rendezvous store, holds that port"
                                   : "the port cannot be opened for listening on this machine";
    throw DistributedError(
        fmt::format("{}: cannot host the job's rendezvous store at port {} ({}): {}; give the job a "
                    "free MASTER_PORT",
                    env.describe(), env.store_port, where, holder));
  }
  const std::string host_of_store = env.agent_store ? "torchrun's agent" : "rank 0";
  const std::string unreachable = fmt::format(
      "{}: cannot reach the rendezvous store at {} ({}) within training.dist_timeout_s {:g} s: nothing answers "
      "there ({} hosts it: not started yet, already ended, or a wrong address)",
      env.describe(), where, n.address, timeout_s, host_of_store);
  const auto not_a_store = [&](const std::string& why) {
    return DistributedError(
        fmt::format("{}: {} ({}) is not a rendezvous store: a program there accepted the connection "
                    "but {}; the port is held by another program: give the job a free MASTER_PORT",
                    env.describe(), where, n.address, why));
  };
  try {
    if (auto store = store_within(env.store_host, o, deadline)) return store;
  } catch (const c10d::TimeoutError& e) {
    spdlog::debug("c10d: {}", error_line(e));
    throw DistributedError(unreachable);
  } catch (const std::exception& e) {
    spdlog::debug("c10d: {}", error_line(e));
    if (!accepts_connections(env.store_host, env.store_port, std::chrono::seconds(1))) {
      throw DistributedError(unreachable);
    }
    throw not_a_store("answered something else");
  }
  // The deadline passed in c10d's constructor: still connecting, or connected to a silent program.
  if (!accepts_connections(env.store_host, env.store_port, std::chrono::seconds(1))) {
    throw DistributedError(unreachable);
  }
  throw not_a_store(fmt::format("did not answer as one within training.dist_timeout_s {:g} s", timeout_s));
}

namespace {

void check_in_now(c10d::Store& store, const LaunchEnv& env, Clock::time_point deadline, double timeout_s) {
  // Keys: join/<rank> holds that rank's world size; join/claims/<rank> counts the processes started
  // as that rank; join/ready counts the ranks > 0 that agreed with rank 0; join/failed holds the
  // first job-wide problem found ("config <line>" or "gone <line>"), so that every rank stops with
  // the same line.
  const auto rank_key = [](int64_t r) { return fmt::format("u3d_join/{}", r); };
  const std::string failed_key = "u3d_join/failed", ready_key = "u3d_join/ready";
  const Names n = names(env);
  const bool hosts_store = env.rank == 0 && !env.agent_store;
  // `line` as the error of its kind: a launch mistake (exit 2) or a rank gone (exit 1, this rank named).
  const auto error = [&](const std::string& kind, const std::string& line) -> std::exception_ptr {
    if (kind == "config") return std::make_exception_ptr(ConfigError(line));
    return std::make_exception_ptr(DistributedError(env.describe() + ": " + line));
  };
  // The store's host waits a moment before it stops, so that the others read the line first.
  const auto linger = [&] {
    if (hosts_store) std::this_thread::sleep_for(std::chrono::milliseconds(1500));
  };
  // A job-wide problem: recorded for the other ranks, then this rank's line.
  const auto fail = [&](const std::string& kind, const std::string& line) {
    store.set(failed_key, bytes(kind + " " + line));
    linger();
    std::rethrow_exception(error(kind, line));
  };
  const auto disagree = [&](int64_t r, int64_t world) {
    fail("config",
         fmt::format("environment: the ranks of the job at {}:{} were started with different world sizes: rank {} "
                     "with {}={}, rank {} with {}={}; start every rank with the same {}",
                     env.store_host, env.store_port, std::min(r, env.rank), n.world,
                     r < env.rank ? world : env.world_size, std::max(r, env.rank), n.world,
                     r < env.rank ? env.world_size : world, n.world));
  };
  const auto world_of = [&](int64_t r) { return parse_int(text(store.get(rank_key(r)))).value_or(-1); };
  try {
    if (store.add(fmt::format("u3d_join/claims/{}", env.rank), 1) > 1) {
      fail("config", fmt::format("environment: two processes were started as rank {} ({}={}) of the job at {}:{}; "
                                 "every process needs its own rank in 0..{}",
                                 env.rank, n.rank, env.rank, env.store_host, env.store_port, env.world_size - 1));
    }
    store.set(rank_key(env.rank), bytes(std::to_string(env.world_size)));
    bool agreed = env.rank == 0;
    for (;;) {
      if (store.check({failed_key})) {
        const std::string value = text(store.get(failed_key));
        const size_t space = value.find(' ');
        linger();
        std::rethrow_exception(error(value.substr(0, space), value.substr(space + 1)));
      }
      if (!agreed && store.check({rank_key(0)})) {
        if (const int64_t world = world_of(0); world != env.world_size) disagree(0, world);
        agreed = true;
        store.add(ready_key, 1);
      }
      if (env.rank == 0 && store.check({rank_key(env.world_size)})) disagree(env.world_size, world_of(env.world_size));
      if (agreed && store.add(ready_key, 0) >= env.world_size - 1) return;  // every rank is there and agrees
      if (Clock::now() > deadline) break;
      std::this_thread::sleep_for(std::chrono::milliseconds(100));
    }
    // The deadline passed: the ranks that never checked in, or checked in with another world size.
    std::vector<int64_t> missing;
    for (int64_t r = 0; r < env.world_size; ++r) {
      if (!store.check({rank_key(r)})) {
        missing.push_back(r);
      } else if (const int64_t world = world_of(r); world != env.world_size) {
        disagree(r, world);
      }
    }
    if (missing.empty()) return;
    fail("gone", fmt::format("rank{} {} never joined the job at the rendezvous store {}:{} within "
                             "training.dist_timeout_s {:g} s (not started, ended while starting, or started with "
                             "another {})",
                             missing.size() > 1 ? "s" : "", fmt::join(missing, ", "), env.store_host, env.store_port,
                             timeout_s, n.address));
  } catch (const Error&) {
    throw;
  } catch (const std::exception& e) {
    spdlog::debug("c10d: {}", error_line(e));
    throw DistributedError(
        fmt::format("{}: the rendezvous store at {}:{} went away while the ranks were joining ({} "
                    "hosts it and ended)",
                    env.describe(), env.store_host, env.store_port, env.agent_store ? "torchrun's agent" : "rank 0"));
  }
}

}  // namespace

void check_in(const c10::intrusive_ptr<c10d::Store>& store, const LaunchEnv& env, Clock::time_point deadline,
              double timeout_s) {
  // On a thread of its own: a store whose host hangs (stopped, deadlocked) never answers.
  if (!finishes_by(deadline + std::chrono::seconds(5),
                   [store, env, deadline, timeout_s] { check_in_now(*store, env, deadline, timeout_s); })) {
    throw DistributedError(
        fmt::format("{}: the rendezvous store at {}:{} stopped answering while the ranks were "
                    "joining ({} hosts it and hangs)",
                    env.describe(), env.store_host, env.store_port, env.agent_store ? "torchrun's agent" : "rank 0"));
  }
}

}  // namespace u3d::rendezvous_detail
