// trainer: parses the command line, dispatches to the library, and maps every failure to a
// one-line message and an exit code (0 ok, 1 runtime failure, 2 usage or config error).
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include <functional>
#include <string>

#include "cli_commands.h"
#include "cli_run.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/logging.h"
#include "u3d/core/version.h"

using namespace u3d_cli;  // NOLINT: the command line's own table and helpers (cli_commands.h, cli_run.h)

namespace {

// `trainer --version`: the program, the LibTorch it was built against, and what this machine offers
// (CUDA runtime, devices, cuDNN). scripts/gpu-check.sh and the bundle's launcher read these lines.
std::string version_text() {
  std::string out =
      fmt::format("trainer {} ({})\nLibTorch {} (built against)", u3d::version(), u3d::git_commit(), TORCH_VERSION);
  try {
    const auto& hooks = at::detail::getCUDAHooks();
    if (!hooks.hasCUDART()) {
      out += "\nCUDA: not in this LibTorch build (CPU only)";
      return out;
    }
    const long rt = hooks.versionCUDART();
    const auto devices = torch::cuda::device_count();
    out += fmt::format("\nCUDA runtime {}.{}: {} device(s)", rt / 1000, (rt % 1000) / 10, devices);
    if (devices == 0) out += " (no usable GPU or driver)";
    if (hooks.hasCuDNN()) {
      const long v = hooks.versionCuDNN();
      out += fmt::format("\ncuDNN {}.{}.{}", v / 10000, (v % 10000) / 100, v % 100);
    } else {
      out += "\ncuDNN: not available";
    }
  } catch (const std::exception& e) {
    out += "\nCUDA: " + u3d::error_line(e);
  }
  return out;
}

// The line for an exception that is not one of ours: a host allocation that failed (LibTorch's
// allocator, std::bad_alloc) in our words; LibTorch's first line, named as such; anything else's.
std::string failure_line(const std::exception& e) {
  if (const auto bytes = u3d::host_allocation_failure(e)) {
    return fmt::format(
        "out of host memory{}; lower data.batch_size or data.patch_size, or use a machine with more "
        "memory",
        *bytes > 0 ? fmt::format(" (an allocation of {} failed)", u3d::human_bytes(*bytes)) : "");
  }
  return (dynamic_cast<const c10::Error*>(&e) ? "LibTorch: " : "") + u3d::error_line(e);
}

// The one way a command ends in failure: the status line cleared, one error line (console,
// train.log, torchrun's error file), the logs flushed, the exit code.
int report_failure(const std::string& line, int exit_code) {
  u3d::set_status_line("");
  spdlog::error("{}", line);
  u3d::write_launcher_error_file(line);
  u3d::flush_logs();
  return exit_code;
}

}  // namespace

int main(int argc, char** argv) {
  u3d::init_console_logging("info");
  CLI::App app{"trainer: fast 3D U-Net training for dose prediction and segmentation"};
  app.set_version_flag("--version", std::function<std::string()>(version_text));
  app.require_subcommand(0, 1);

  // Commands in workflow order (as --help lists them); each declares its options in its own file.
  Commands commands;
  add_synth_command(app, commands);
  add_import_commands(app, commands);
  add_check_data_command(app, commands);
  add_plan_command(app, commands);
  add_cascade_command(app, commands);
  RunCli rc;  // train, resume, predict, benchmark and the root flags they replace (cli_run.h)
  add_root_aliases(app, rc);
  add_train_command(app, rc);
  add_resume_command(app, rc);
  add_predict_command(app, rc);
  add_evaluate_commands(app, commands);
  add_export_command(app, commands);
  add_benchmark_command(app, rc);
  add_bench_norm_command(app, commands);
  add_plot_command(app, commands);
  add_config_reference_command(app, commands);
  Verbosity verbosity;
  add_verbosity(&app, verbosity);

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    if (e.get_exit_code() == 0) return app.exit(e);  // --help, --version
    // One line, as every other usage error (CLI11's own ends in a second "Run with --help" line).
    spdlog::error("{}; see trainer --help", u3d::error_line(e));
    u3d::flush_logs();
    return u3d::kExitUsage;
  }

  try {
    apply_verbosity(verbosity, rc);
    if (const auto* run = commands.parsed()) return (*run)();
    return dispatch_run(app, rc);
  } catch (const u3d::Error& e) {
    return report_failure(u3d::error_line(e), e.exit_code());
  } catch (const std::exception& e) {
    return report_failure(failure_line(e), u3d::kExitRuntime);
  }
}
