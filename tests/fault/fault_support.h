// Helpers shared by the fault-injection tests: run folders, checkpoint checks, weight comparison,
// and private mounts (tmpfs, read-only binds) where the test may create them.
#pragma once
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>

#include <fstream>
#include <random>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "expectations.h"
#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_store.h"

namespace u3d::test {

inline std::string with_overrides(std::string yaml, const std::vector<std::pair<std::string, std::string>>& sets) {
  Config c = load_config_from_string(yaml, "fault.yaml");
  for (const auto& [k, v] : sets) apply_override(c, k + "=" + v);
  return to_yaml(c);
}

// Temporary files of write_file_atomic in `folder`.
inline std::vector<fs::path> temporaries(const fs::path& folder) {
  std::vector<fs::path> out;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator(folder, ec)) {
    if (e.path().filename().string().find(".tmp.") != std::string::npos) out.push_back(e.path());
  }
  return out;
}

// Whether the manifest lists some file twice (a kill between protocol steps 2 and 4).
inline bool manifest_lists_a_name_twice(const fs::path& checkpoints) {
  std::istringstream in(read_text(checkpoints / CheckpointStore::kManifestName));
  std::set<std::string> names;
  std::string line;
  while (std::getline(in, line)) {
    if (line.size() > 66 && !names.insert(line.substr(66)).second) return true;
  }
  return false;
}

// Periodic checkpoints that match the manifest.
inline int64_t verified_periodic(const fs::path& checkpoints) {
  CheckpointStore store(checkpoints, 2);
  int64_t n = 0;
  for (const auto& p : store.periodic()) n += store.verify(p).verified() ? 1 : 0;
  return n;
}

// A test folder with an 8-case dose phantom (p.h5), tiny configs made from it, and the trainer
// executable run in that folder.
class PhantomRunTest : public ::testing::Test {
 protected:
  void SetUp() override { make_phantom(dir / "p.h5", Task::kDose, 8, 16); }
  // <dir>/<name>.yaml: tiny_config() of `dataset` for experiment `name`, with `sets` applied.
  void config(const std::string& name, const std::vector<std::pair<std::string, std::string>>& sets,
              const std::string& dataset = "p.h5") {
    write_text(dir / (name + ".yaml"), with_overrides(tiny_config(dataset, name), sets));
  }
  fs::path run(const std::string& name) const { return dir / "runs" / name; }
  fs::path ckpts(const std::string& name) const { return run(name) / "checkpoints"; }
  CommandResult trainer(const std::vector<std::string>& args) { return run_trainer(args, dir.path()); }
  TempDir dir;
};

// Options of a trainer process that runs with the fault injection `spec` (U3D_TEST_FAULTS).
inline ProcessOptions with_faults(const std::string& spec) {
  ProcessOptions o;
  o.env["U3D_TEST_FAULTS"] = spec;
  return o;
}

// Waits for `p` and expects `exit_code` and each of `needles` in its output (every check prints the
// output when it fails); the output.
inline std::string expect_exit(TrainerProcess& p, int exit_code, const std::vector<std::string>& needles) {
  const int code = p.wait();
  const std::string out = p.output();
  EXPECT_EQ(code, exit_code) << out;
  for (const auto& needle : needles) EXPECT_TRUE(contains(out, needle)) << out;
  return out;
}

inline size_t count_lines(const fs::path& p) {
  const std::string t = read_text(p);
  return static_cast<size_t>(std::count(t.begin(), t.end(), '\n'));
}

// A private mount namespace for this test process and the trainers it starts (each test runs in
// its own process under ctest), so tmpfs and read-only binds vanish with it. False when the
// system does not allow it (no CAP_SYS_ADMIN): the test then skips what needs it.
inline bool private_mount_namespace() {
  static const bool ok =
      ::unshare(CLONE_NEWNS) == 0 && ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) == 0;
  return ok;
}

inline bool mount_tmpfs(const fs::path& at, const std::string& size) {
  fs::create_directories(at);
  return ::mount("tmpfs", at.c_str(), "tmpfs", 0, ("size=" + size).c_str()) == 0;
}

inline bool bind_read_only(const fs::path& folder) {
  return ::mount(folder.c_str(), folder.c_str(), nullptr, MS_BIND, nullptr) == 0 &&
         ::mount(nullptr, folder.c_str(), nullptr, MS_REMOUNT | MS_BIND | MS_RDONLY, nullptr) == 0;
}

inline void unmount(const fs::path& at) { ::umount2(at.c_str(), MNT_DETACH); }

}  // namespace u3d::test
