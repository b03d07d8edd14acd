#include "test_support.h"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "u3d/synth.h"

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
  for (auto it = fs::recursive_directory_iterator(path_, ec); it != fs::recursive_directory_iterator(); it.increment(ec)) {
    fs::permissions(it->path(), fs::perms::owner_all, fs::perm_options::add, ec);
  }
  fs::remove_all(path_, ec);
}

fs::path trainer_path() { return U3D_TRAINER_PATH; }
fs::path source_dir() { return U3D_SOURCE_DIR; }

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

void make_phantom(const fs::path& path, Task task, int64_t cases, int64_t size, uint64_t seed) {
  PhantomOptions o;
  o.task = task;
  o.cases = cases;
  o.size = {size, size, size};
  o.seed = seed;
  write_phantom_dataset(o, path);
}

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
  std::istringstream in(read_text(path));
  std::string line;
  std::vector<std::string> header;
  auto split = [](const std::string& l) {
    std::vector<std::string> out;
    std::string cur;
    for (char c : l) {
      if (c == ',') {
        out.push_back(cur);
        cur.clear();
      } else {
        cur += c;
      }
    }
    out.push_back(cur);
    return out;
  };
  if (!std::getline(in, line)) return rows;
  header = split(line);
  while (std::getline(in, line)) {
    const auto fields = split(line);
    std::map<std::string, std::string> row;
    for (size_t i = 0; i < header.size() && i < fields.size(); ++i) row[header[i]] = fields[i];
    rows.push_back(row);
  }
  return rows;
}

std::optional<fs::path> shared_data_dir() {
  if (const char* env = std::getenv("U3D_SHARED_DATA")) {
    if (fs::exists(env)) return fs::path(env);
  }
  const fs::path p = U3D_SHARED_DATA_DIR;
  if (fs::exists(p)) return p;
  return std::nullopt;
}

std::optional<fs::path> unpack_openkbp_sample(const fs::path& dest) {
  const auto data = shared_data_dir();
  if (!data || !fs::exists(*data / "openkbp-sample.tar.xz")) return std::nullopt;
  fs::create_directories(dest);
  const std::string cmd = "tar -xJf " + shell_quote((*data / "openkbp-sample.tar.xz").string()) + " -C " +
                          shell_quote(dest.string());
  if (std::system(cmd.c_str()) != 0) throw std::runtime_error("unpacking the OpenKBP sample failed: " + cmd);
  return dest / "provided-data";
}

}  // namespace u3d::test
