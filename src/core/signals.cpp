#include "u3d/core/signals.h"

#include "u3d/core/errors.h"

#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cstring>

namespace u3d {
namespace {

std::atomic<int> g_first{0};               // first stop signal
std::atomic<int> g_count{0};               // stop signals received
std::atomic<const char*> g_what_next{""};  // the first signal's answer
static_assert(std::atomic<int>::is_always_lock_free && std::atomic<const char*>::is_always_lock_free,
              "signal handlers need lock-free atomics");

void write_stderr(const char* text) {
  const ssize_t ignored = ::write(STDERR_FILENO, text, std::strlen(text));
  (void)ignored;
}

// Async-signal-safe: atomics, write(2) and _exit(2) only.
void on_stop_signal(int sig) {
  int expected = 0;
  g_first.compare_exchange_strong(expected, sig);
  const int n = g_count.fetch_add(1) + 1;
  if (n == 1) {
    write_stderr("\n[trainer] ");
    write_stderr(StopSignals::name(sig));
    write_stderr(" received: ");
    write_stderr(g_what_next.load());
    write_stderr("\n");
  } else if (n == 2) {
    write_stderr("\n[trainer] already stopping: finishing the checkpoint; a third signal exits at once\n");
  } else if (n >= 3) {
    write_stderr("\n[trainer] third signal: exiting now; the newest committed checkpoint is intact\n");
    ::_exit(128 + g_first.load());
  }
}

constexpr int kStopSignals[] = {SIGINT, SIGTERM, SIGHUP};

}  // namespace

struct StopSignals::Saved {
  struct sigaction old_actions[3];
  bool installed[3] = {false, false, false};
  struct sigaction old_pipe;
};

StopSignals::StopSignals(const char* what_next) : saved_(new Saved) {
  g_first.store(0);
  g_count.store(0);
  g_what_next.store(what_next);
  struct sigaction action {};
  action.sa_handler = on_stop_signal;
  sigemptyset(&action.sa_mask);
  action.sa_flags = SA_RESTART;  // interrupted reads and writes resume
  for (int i = 0; i < 3; ++i) {
    struct sigaction current {};
    ::sigaction(kStopSignals[i], nullptr, &current);
    if (kStopSignals[i] == SIGHUP && current.sa_handler == SIG_IGN) continue;  // started under nohup
    saved_->installed[i] = ::sigaction(kStopSignals[i], &action, &saved_->old_actions[i]) == 0;
  }
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  sigemptyset(&ignore.sa_mask);
  ::sigaction(SIGPIPE, &ignore, &saved_->old_pipe);
}

StopSignals::~StopSignals() {
  for (int i = 0; i < 3; ++i) {
    if (saved_->installed[i]) ::sigaction(kStopSignals[i], &saved_->old_actions[i], nullptr);
  }
  ::sigaction(SIGPIPE, &saved_->old_pipe, nullptr);
  delete saved_;
}

int StopSignals::pending() { return g_first.load(std::memory_order_relaxed); }

void StopSignals::throw_if_stopped(const std::string& output) {
  if (const int sig = pending()) {
    throw StoppedError(
        fmt::format("{}: stopped by {}; nothing written (the partial file was removed)", output, name(sig)), sig);
  }
}

const char* StopSignals::name(int signal) {
  switch (signal) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "signal";
  }
}

}  // namespace u3d
