#include "test_support.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <thread>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "u3d/core/csv.h"
#include "u3d/core/run.h"
#include "u3d/io/synth.h"
#include "u3d/model/checkpoint.h"

namespace u3d::test {

TempDir::TempDir() {
  const char* base = std::getenv("TMPDIR");
  std::string pattern = std::string(base && *base ? base : "/tmp") + "/u3d-test-XXXXXX";
  std::vector<char> buf(pattern.begin(), pattern.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
  path_ = buf.data();
}

TempDir::~TempDir() {
  std::error_code ec;
  // Restore permissions a test may have removed, then delete.
  for (auto it = fs::recursive_directory_iterator(path_, ec); it != fs::recursive_directory_iterator();
       it.increment(ec)) {
    fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  }
  fs::remove_all(path_, ec);
}

namespace {
// A path compiled in relative to the folder of this test executable (tests/CMakeLists.txt), unless
// the environment variable `env` names one.
fs::path located(const char* env, const char* relative) {
  if (const char* v = std::getenv(env); v && *v) return fs::path(v);
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  const fs::path base = ec ? fs::current_path() : exe.parent_path();
  return (base / relative).lexically_normal();
}
}  // namespace

fs::path trainer_path() { return located("U3D_TRAINER", U3D_TRAINER_PATH); }
fs::path source_dir() { return located("U3D_SOURCE_DIR", U3D_SOURCE_DIR); }

Network load_network(const fs::path& checkpoint) {
  const CheckpointInfo info = read_checkpoint_info(checkpoint);
  const Config cfg = load_config_from_string(info.config_yaml, checkpoint.string());
  Network net = build_network(cfg.model, info.in_channels, info.out_channels);
  load_checkpoint(checkpoint, *net, nullptr, torch::kCPU, /*restore_rng=*/false);
  return net;
}

std::map<std::string, torch::Tensor> checkpoint_tensors(const fs::path& checkpoint) {
  Network net = load_network(checkpoint);
  std::map<std::string, torch::Tensor> out;
  for (const auto& p : net->named_parameters()) out[p.key()] = p.value().detach().clone();
  for (const auto& b : net->named_buffers()) out["buffer:" + b.key()] = b.value().detach().clone();
  return out;
}

void expect_same_weights(const fs::path& a, const fs::path& b, double tolerance) {
  const auto wa = checkpoint_tensors(a), wb = checkpoint_tensors(b);
  ASSERT_EQ(wa.size(), wb.size()) << a << " against " << b;
  for (const auto& [k, t] : wa) {
    ASSERT_EQ(wb.count(k), 1u) << k << " of " << a << " is not in " << b;
    if (tolerance == 0) {
      EXPECT_TRUE(torch::equal(t, wb.at(k))) << k << ": " << a << " must equal " << b;
    } else {
      const double scale = std::max(wb.at(k).abs().max().item<double>(), 1e-12);
      EXPECT_LT((t - wb.at(k)).abs().max().item<double>() / scale, tolerance) << k << ": " << a << " against " << b;
    }
  }
}

std::optional<fs::path> torch_python() {
  if (const char* p = std::getenv("U3D_TORCH_PYTHON"); p && *p && fs::exists(p)) return fs::path(p);
  return std::nullopt;
}

int free_tcp_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  int port = 0;
  if (fd >= 0 && ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0) {
    port = ntohs(addr.sin_port);
  }
  if (fd >= 0) ::close(fd);
  return port;
}

namespace {
std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'') {
      out += "'\\''";
    } else {
      out += c;
    }
  }
  return out + "'";
}
}  // namespace

CommandResult run_trainer(const std::vector<std::string>& args, const fs::path& cwd) {
  std::string cmd = "cd " + shell_quote(cwd.string()) + " && " + shell_quote(trainer_path().string());
  for (const auto& a : args) cmd += " " + shell_quote(a);
  cmd += " 2>&1";
  CommandResult r;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  if (!pipe) return r;
  std::array<char, 4096> buf{};
  size_t n = 0;
  while ((n = std::fread(buf.data(), 1, buf.size(), pipe)) > 0) r.output.append(buf.data(), n);
  const int status = ::pclose(pipe);
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  return r;
}

TrainerProcess::TrainerProcess(const std::vector<std::string>& args, const fs::path& cwd, ProcessOptions options) {
  static std::atomic<int> counter{0};
  log_ = options.log.empty() ? cwd / ("trainer-" + std::to_string(counter.fetch_add(1)) + ".out") : options.log;
  const std::string binary = options.program.empty() ? trainer_path().string() : options.program.string();
  std::vector<std::string> argv_text = {binary};
  argv_text.insert(argv_text.end(), args.begin(), args.end());
  // Everything the child needs is built before fork: after it, only async-signal-safe calls.
  std::vector<char*> argv;
  for (auto& a : argv_text) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::vector<std::string> env_text;
  for (char** e = environ; *e; ++e) {
    const std::string entry = *e;
    if (!options.env.count(entry.substr(0, entry.find('=')))) env_text.push_back(entry);
  }
  for (const auto& [k, v] : options.env) env_text.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& e : env_text) envp.push_back(e.data());
  envp.push_back(nullptr);
  const std::string log_text = log_.string(), cwd_text = cwd.string();
  pid_ = ::fork();
  if (pid_ < 0) throw std::runtime_error("fork failed");
  if (pid_ == 0) {  // child: only async-signal-safe work from here on, then exec
    const int fd = ::open(log_text.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd >= 0) {
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
      ::close(fd);
    }
    if (::chdir(cwd_text.c_str()) != 0) ::_exit(127);
    ::signal(SIGINT, SIG_DFL);
    ::signal(SIGTERM, SIG_DFL);
    ::signal(SIGHUP, options.ignore_sighup ? SIG_IGN : SIG_DFL);
    sigset_t none;
    sigemptyset(&none);
    ::sigprocmask(SIG_SETMASK, &none, nullptr);
    if (options.file_size_limit > 0) {
      ::signal(SIGXFSZ, SIG_IGN);
      struct rlimit lim {
        options.file_size_limit, options.file_size_limit
      };
      ::setrlimit(RLIMIT_FSIZE, &lim);
    }
    if (options.address_space_limit > 0) {
      struct rlimit lim {
        options.address_space_limit, options.address_space_limit
      };
      ::setrlimit(RLIMIT_AS, &lim);
    }
    ::execve(argv[0], argv.data(), envp.data());
    ::_exit(127);
  }
}

TrainerProcess::~TrainerProcess() {
  if (pid_ > 0 && !reaped_) {
    ::kill(pid_, SIGKILL);
    ::waitpid(pid_, &status_, 0);
  }
}

void TrainerProcess::signal(int sig) {
  if (pid_ > 0 && !reaped_) ::kill(pid_, sig);
}

bool TrainerProcess::running() {
  if (reaped_) return false;
  const pid_t r = ::waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

int TrainerProcess::wait(double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (running()) {
    if (std::chrono::steady_clock::now() > deadline) {
      ADD_FAILURE() << "trainer (pid " << pid_ << ") still running after " << timeout_seconds << " s; killed\n"
                    << output();
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, &status_, 0);
      reaped_ = true;
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(2));
  }
  return WIFEXITED(status_) ? WEXITSTATUS(status_) : 128 + WTERMSIG(status_);
}

bool TrainerProcess::wait_until(const std::function<bool()>& ready, double timeout_seconds) {
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_seconds);
  while (std::chrono::steady_clock::now() < deadline) {
    if (ready()) return true;
    if (!running()) return ready();
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return false;
}

std::string TrainerProcess::output() const { return read_text(log_); }

void make_phantom(const fs::path& path, Task task, int64_t cases, int64_t size, uint64_t seed) {
  PhantomOptions o;
  o.task = task;
  o.cases = cases;
  o.size = {size, size, size};
  o.seed = seed;
  write_phantom_dataset(o, path);
}

NoTf32::NoTf32() : cublas_(at::globalContext().allowTF32CuBLAS()), cudnn_(at::globalContext().allowTF32CuDNN()) {
  at::globalContext().setAllowTF32CuBLAS(false);
  at::globalContext().setAllowTF32CuDNN(false);
}

NoTf32::~NoTf32() {
  at::globalContext().setAllowTF32CuBLAS(cublas_);
  at::globalContext().setAllowTF32CuDNN(cudnn_);
}

Deterministic::Deterministic() { set_deterministic(true); }
Deterministic::~Deterministic() { set_deterministic(false); }

std::string tiny_config(const fs::path& dataset, const std::string& name, Task task) {
  std::ostringstream s;
  s << "experiment:\n  name: " << name << "\n  seed: 7\n"
    << "data:\n  path: " << dataset.string() << "\n  batch_size: 2\n  patch_size: 16\n";
  if (task == Task::kDose) {
    s << "  normalize: [\"clip:-1000:1000\", none, none, none, none]\n  target_scale: 70\n";
  } else {
    s << "  normalize: [zscore]\n";
  }
  s << "model:\n  levels: 2\n  base_filters: 4\n"
    << "training:\n  epochs: 2\n  lr: 0.003\n  threads: 1\n  deterministic: true\n  device: cpu\n"
    << "checkpoint:\n  keep_last: 10\n"
    << "logging:\n  progress_seconds: 0\n";
  return s.str();
}

void write_text(const fs::path& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary);
  out << text;
}

std::string read_text(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

std::vector<std::map<std::string, std::string>> read_csv(const fs::path& path) {
  std::vector<std::map<std::string, std::string>> rows;
  const auto parsed = parse_csv(read_text(path));
  if (parsed.empty()) return rows;
  const auto& header = parsed.front().fields;
  for (size_t r = 1; r < parsed.size(); ++r) {
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < parsed[r].fields.size(); ++i) row[header[i]] = parsed[r].fields[i];
    rows.push_back(row);
  }
  return rows;
}

std::optional<fs::path> shared_data_dir() {
  if (const char* env = std::getenv("U3D_SHARED_DATA")) {
    if (fs::exists(env)) return fs::path(env);
  }
  const fs::path p = located("U3D_SHARED_DATA_DIR", U3D_SHARED_DATA_DIR);
  if (fs::exists(p)) return p;
  return std::nullopt;
}

std::optional<fs::path> unpack_openkbp_sample(const fs::path& dest) {
  const auto data = shared_data_dir();
  if (!data || !fs::exists(*data / "openkbp-sample.tar.xz")) return std::nullopt;
  fs::create_directories(dest);
  const std::string cmd =
      "tar -xJf " + shell_quote((*data / "openkbp-sample.tar.xz").string()) + " -C " + shell_quote(dest.string());
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("unpacking the OpenKBP sample failed: " + cmd);
  return dest / "provided-data";
}

}  // namespace u3d::test
