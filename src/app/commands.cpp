#include "u3d/app/commands.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "u3d/app/benchmark.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/logging.h"
#include "u3d/core/run.h"
#include "u3d/core/run_lock.h"
#include "u3d/core/signals.h"
#include "u3d/core/text.h"
#include "u3d/data/cache.h"
#include "u3d/data/preflight.h"
#include "u3d/io/synth.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/trainer.h"

namespace u3d {
namespace {

Shape3 parse_size(const std::string& text) {
  const auto v = parse_int_list(text, ",x").value_or(std::vector<int64_t>{});
  if (v.empty() || std::any_of(v.begin(), v.end(), [](int64_t n) { return n <= 0; })) {
    throw UsageError(fmt::format("synth: --size '{}': expected S or D,H,W (positive integers)", text));
  }
  if (v.size() == 1) return {v[0], v[0], v[0]};
  if (v.size() == 3) return {v[0], v[1], v[2]};
  throw UsageError(fmt::format("synth: --size '{}': expected S or D,H,W", text));
}

}  // namespace

int run_command(const RunCommand& cmd) {
  if (cmd.config.empty()) throw UsageError("--config is required (trainer --config exp.yaml); see --help");
  if (cmd.predict_only && cmd.resume) throw UsageError("--predict-only and --resume cannot be combined");
  if (cmd.checkpoint_given && !cmd.predict_only) {
    throw UsageError(
        fmt::format("--checkpoint {} only applies with --predict-only (to continue training from a "
                    "checkpoint: --resume {})",
                    cmd.checkpoint, cmd.checkpoint));
  }
  if (!cmd.allow_config_change.empty() && !cmd.resume) {
    throw UsageError("--allow-config-change only applies with --resume");
  }
  if (cmd.benchmark && (cmd.predict_only || cmd.resume)) {
    throw UsageError("--benchmark cannot be combined with --predict-only or --resume");
  }
  if (!cmd.workers.empty() && cmd.benchmark != std::optional<std::string>("data")) {
    throw UsageError("--workers goes with --benchmark data");
  }
  const bool step_benchmark = cmd.benchmark && (cmd.benchmark->empty() || *cmd.benchmark == "step");
  if (cmd.benchmark && *cmd.benchmark != "data" && !step_benchmark) {
    throw UsageError(
        fmt::format("--benchmark '{}': expected data, step, or no value for the training step", *cmd.benchmark));
  }
  if (cmd.steps_given && !step_benchmark) throw UsageError("--steps and --warmup go with --benchmark (step)");
  Config cfg = load_config(cmd.config, cmd.overrides);
  check_machine_limits(cfg);
  init_console_logging(cfg.logging.level);
  if (step_benchmark) return step_benchmark_command(cfg, StepBenchmarkOptions{cmd.steps, cmd.warmup});
  if (cmd.benchmark) {
    DataBenchmarkOptions o;
    if (!cmd.workers.empty()) o.workers = parse_worker_list(cmd.workers);
    o.seconds = cmd.benchmark_seconds;
    return data_benchmark_command(cfg, o);
  }
  // One process at a time in a run folder (training, resume, predict-only); held until return.
  const RunLock lock(RunPaths(cfg).root);
  if (cmd.predict_only) {
    const StopSignals signals;  // a stop between cases removes the staged outputs (StoppedError)
    run_prediction(cfg, cmd.checkpoint);
    return kExitOk;
  }
  Trainer trainer(std::move(cfg), TrainOptions{cmd.resume, cmd.allow_config_change});
  trainer.fit();
  return trainer.stop_signal() ? 128 + trainer.stop_signal() : kExitOk;
}

int check_data_command(const CheckDataCommand& cmd) {
  if (cmd.file.empty()) throw UsageError("check-data: FILE is required (trainer check-data data.h5)");
  std::error_code ec;
  if (!std::filesystem::exists(cmd.file, ec)) throw UsageError(fmt::format("check-data: {} not found", cmd.file));
  std::vector<std::string> ids;
  if (!cmd.split.empty()) {
    const DatasetReader reader(cmd.file);
    ids = reader.split(cmd.split);
  }
  int64_t threads = cmd.threads;
  if (threads <= 0) threads = host_threads(Config{});
  const auto t0 = std::chrono::steady_clock::now();
  const DataReport report = check_dataset(cmd.file, ids, threads);
  for (const auto& p : report.problems) {
    std::printf("%-7s %s\n", p.is_error() ? "error" : "warning", report.describe(p).c_str());
  }
  std::printf("check-data: %s: %lld case(s) read in full in %.1f s: %lld error(s) in %zu case(s), %lld warning(s)%s\n",
              cmd.file.c_str(), static_cast<long long>(report.cases_checked),
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(),
              static_cast<long long>(report.errors()), report.bad_cases().size(),
              static_cast<long long>(report.warnings()),
              report.errors() > 0 ? "; training refuses these cases" : "; ready to train");
  std::fflush(stdout);
  return report.errors() > 0 ? kExitRuntime : kExitOk;
}

int synth_command(const SynthCommand& cmd) {
  if (cmd.out.empty()) throw UsageError("synth: --out FILE is required");
  PhantomOptions o;
  if (cmd.task == "dose") {
    o.task = Task::kDose;
  } else if (cmd.task == "segmentation") {
    o.task = Task::kSegmentation;
  } else {
    throw UsageError(fmt::format("synth: --task '{}': expected dose or segmentation", cmd.task));
  }
  o.cases = cmd.cases;
  o.size = parse_size(cmd.size);
  {  // One phantom case is built in memory (a few float32 volumes): refuse sizes that cannot fit.
    const double case_bytes =
        4.0 * 8.0 * static_cast<double>(o.size[0]) * static_cast<double>(o.size[1]) * static_cast<double>(o.size[2]);
    const int64_t host_free = available_bytes(CachePlacement::kMemory, torch::kCPU);
    if (host_free > 0 && case_bytes > 0.5 * static_cast<double>(host_free)) {
      throw UsageError(fmt::format(
          "synth: --size {}x{}x{}: one case needs about {}, more than half of the {} of memory "
          "available; use a smaller --size",
          o.size[0], o.size[1], o.size[2], human_bytes(case_bytes), human_bytes(static_cast<double>(host_free))));
    }
  }
  o.seed = cmd.seed;
  o.val_fraction = cmd.val_fraction;
  o.test_fraction = cmd.test_fraction;
  std::error_code ec;
  if (std::filesystem::exists(cmd.out, ec) && !cmd.force) {
    throw UsageError(fmt::format("synth: {} exists; pass --force to replace it", cmd.out));
  }
  const auto t0 = std::chrono::steady_clock::now();
  const StopSignals signals;  // a stop between cases removes the staged file (StoppedError)
  if (cmd.format == "nnunet") {
    write_phantom_nnunet_raw(o, cmd.out);
  } else if (cmd.format == "h5") {
    write_phantom_dataset(o, cmd.out);
  } else {
    throw UsageError(fmt::format("synth: --format '{}': expected h5 or nnunet", cmd.format));
  }
  spdlog::info("synth: wrote {} ({} {} cases of {}x{}x{}, seed {}) in {:.1f} s", cmd.out, o.cases, cmd.task, o.size[0],
               o.size[1], o.size[2], o.seed,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return kExitOk;
}

int config_reference_command() {
  std::fputs(reference_markdown().c_str(), stdout);
  return kExitOk;
}

}  // namespace u3d
