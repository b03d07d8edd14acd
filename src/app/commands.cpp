#include "u3d/app/commands.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <optional>

#include "u3d/app/benchmark.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/logging.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/run.h"
#include "u3d/core/run_lock.h"
#include "u3d/core/signals.h"
#include "u3d/core/text.h"
#include "u3d/data/cache.h"
#include "u3d/data/folds.h"
#include "u3d/data/preflight.h"
#include "u3d/evaluate/cross_validation.h"
#include "u3d/io/synth.h"
#include "u3d/io/tiff/tiff.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_store.h"
#include "u3d/predict/predictor.h"
#include "u3d/train/resolve.h"
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

// Trains one run folder; with cross-validation, then predicts the fold's held-out cases with its
// best checkpoint into <run>/predictions/val.h5 and val_metrics.csv (what `trainer evaluate cv`
// pools). Exit code 0, or 128 + signal when a stop signal ended training early.
int train_run(Config cfg, std::optional<std::string> resume, const std::vector<std::string>& allow_change) {
  const LaunchEnv& launch = launch_env();
  // One process at a time in a run folder, held until return; data-parallel: rank 0 holds it for
  // the job (the other ranks never write the folder).
  std::optional<RunLock> lock;
  if (launch.is_main()) lock.emplace(RunPaths(cfg).root);
  if (launch.restart_count > 0 && !resume &&
      CheckpointStore(RunPaths(cfg).checkpoints, cfg.checkpoint.keep_last).latest()) {
    resume = "";  // torchrun --max-restarts: the restarted workers continue from the newest checkpoint
    spdlog::info("torchrun restart {}: resuming from the newest checkpoint", launch.restart_count);
  }
  Config resolved;
  {  // the trainer's caches and model are freed before the fold's prediction
    Trainer trainer(std::move(cfg), TrainOptions{resume, allow_change, launch});
    trainer.fit();
    if (trainer.stop_signal()) return 128 + trainer.stop_signal();
    resolved = trainer.config();
  }
  if (!launch.is_main()) return kExitOk;  // rank 0 predicts the fold's held-out cases
  if (fold_number(resolved)) {
    Config val = resolved;
    val.predict.split = "val";  // the fold's held-out cases
    const StopSignals signals;
    spdlog::info("cross-validation: predicting fold {}'s held-out cases with its best checkpoint", val.experiment.fold);
    run_prediction(val, "best");
  }
  return kExitOk;
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
  if (cmd.profile && !step_benchmark) throw UsageError("--profile goes with --benchmark (step)");
  if (!cmd.ensemble.empty() && !cmd.predict_only) throw UsageError("--ensemble goes with --predict-only");
  if (!cmd.ensemble.empty() && !cmd.fold.empty()) {
    throw UsageError(
        "--ensemble and --fold cannot be combined (--predict-only --fold all is the ensemble of every fold)");
  }
  std::vector<std::string> overrides = cmd.overrides;
  if (!cmd.fold.empty()) overrides.push_back("experiment.fold=" + cmd.fold);
  Config cfg = load_config(cmd.config, overrides);
  check_machine_limits(cfg);
  init_console_logging(cfg.logging.level);
  if (!launch_env().is_main()) spdlog::set_level(spdlog::level::warn);  // data-parallel: rank 0 reports
  if (step_benchmark) return step_benchmark_command(cfg, StepBenchmarkOptions{cmd.steps, cmd.warmup, cmd.profile});
  if (cmd.benchmark) {
    DataBenchmarkOptions o;
    if (!cmd.workers.empty()) o.workers = parse_worker_list(cmd.workers);
    o.seconds = cmd.benchmark_seconds;
    return data_benchmark_command(cfg, o);
  }
  if (cfg.data.folds > 0 && cfg.experiment.fold.empty() && cmd.ensemble.empty()) {
    throw ConfigError(fmt::format("{}: data.folds: {} needs experiment.fold: 0..{} or all (or `trainer --fold K|all`)",
                                  key_origin(cfg, "data.folds"), cfg.data.folds, cfg.data.folds - 1));
  }
  const bool all_folds = cfg.experiment.fold == "all";
  if (cmd.predict_only && !launch_env().is_main()) {
    spdlog::warn("{}: --predict-only runs on rank 0 alone; nothing to do here", launch_env().describe());
    return kExitOk;
  }
  if (cmd.predict_only && (all_folds || !cmd.ensemble.empty())) {
    std::vector<std::string> members = cmd.ensemble;
    // The folds' members are the folds of folds.json: a data.folds that differs from it, or a missing
    // file under fold runs, is refused (load_folds) rather than ensembling the wrong members.
    if (all_folds) load_folds(*open_dataset(cfg), cfg);
    for (int64_t k = 0; all_folds && k < cfg.data.folds; ++k) members.push_back("fold_" + std::to_string(k));
    const RunLock lock(std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name / "ensemble");
    const StopSignals signals;
    run_ensemble_prediction(cfg, members, cmd.checkpoint);
    return kExitOk;
  }
  if (cmd.predict_only) {
    const RunLock lock(RunPaths(cfg).root);  // one process at a time in a run folder
    const StopSignals signals;               // a stop between cases removes the staged outputs (StoppedError)
    run_prediction(cfg, cmd.checkpoint);
    return kExitOk;
  }
  if (cfg.data.folds > 0) load_or_save_folds(*open_dataset(cfg), cfg);  // folds.json, once per experiment
  if (!all_folds) return train_run(cfg, cmd.resume, cmd.allow_config_change);
  if (cmd.resume && !cmd.resume->empty()) {
    throw UsageError("--fold all resumes each fold from its newest checkpoint; --resume CHECKPOINT names one run");
  }
  for (int64_t k = 0; k < cfg.data.folds; ++k) {
    const Config fold_cfg = config_for_fold(cfg, k);
    std::optional<std::string> resume = cmd.resume;
    if (resume && !CheckpointStore(RunPaths(fold_cfg).checkpoints, cfg.checkpoint.keep_last).latest()) {
      resume.reset();  // not started yet: from scratch
    }
    spdlog::info("cross-validation: fold {} of {}{}", k, cfg.data.folds, resume ? " (resumed)" : "");
    const int code = train_run(fold_cfg, resume, cmd.allow_config_change);
    if (code != kExitOk) return code;
  }
  spdlog::info("cross-validation: {} folds done; `trainer evaluate cv {}` summarises them", cfg.data.folds,
               (std::filesystem::path(cfg.experiment.output_dir) / cfg.experiment.name).string());
  return kExitOk;
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
  } else if (cmd.task == "surface") {
    o.task = Task::kSegmentation;
    o.kind = PhantomKind::kSurface;
  } else if (cmd.task == "kits") {
    o.task = Task::kSegmentation;
    o.kind = PhantomKind::kKits;
  } else {
    throw UsageError(fmt::format("synth: --task '{}': expected dose, segmentation, surface or kits", cmd.task));
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
  // The phantom writers, one row per --format.
  using PhantomWriter = void (*)(const PhantomOptions&, const std::filesystem::path&);
  const std::array<std::pair<const char*, PhantomWriter>, 4> writers = {{{"h5", write_phantom_dataset},
                                                                         {"nnunet", write_phantom_nnunet_raw},
                                                                         {"tiff", write_phantom_tiff},
                                                                         {"png", write_phantom_png}}};
  const auto writer =
      std::find_if(writers.begin(), writers.end(), [&](const auto& w) { return cmd.format == w.first; });
  if (writer == writers.end()) {
    throw UsageError(fmt::format("synth: --format '{}': expected h5, nnunet, tiff or png", cmd.format));
  }
  writer->second(o, cmd.out);
  spdlog::info("synth: wrote {} ({} {} cases of {}x{}x{}, seed {}) in {:.1f} s", cmd.out, o.cases, cmd.task, o.size[0],
               o.size[1], o.size[2], o.seed,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return kExitOk;
}

int evaluate_cv_command(const EvaluateCvCommand& cmd) {
  const CvSummary s = summarize_cross_validation(cmd.experiment);
  for (const auto& name : s.stray) {  // also in the table; a warning so a log reader sees it too
    spdlog::warn("evaluate cv: {} is not one of folds.json's folds; left out of the pooled and per-fold means",
                 (std::filesystem::path(cmd.experiment) / name).string());
  }
  const auto out =
      cmd.out.empty() ? std::filesystem::path(cmd.experiment) / "cv_summary.csv" : std::filesystem::path(cmd.out);
  for (const auto& f : s.folds) {
    refuse_output_over_input(
        "evaluate cv", "--out", out,
        {std::filesystem::path(cmd.experiment) / fmt::format("fold_{}", f.fold) / "predictions" / "val_metrics.csv"});
  }
  write_file_atomic(out, cv_summary_csv(s));
  std::fputs(cv_summary_table(s).c_str(), stdout);
  std::fflush(stdout);
  spdlog::info("evaluate cv: {} fold(s), pooled {} {:.4f}; wrote {}", s.folds.size(), s.metric, s.pooled, out.string());
  return kExitOk;
}

int config_reference_command() {
  std::fputs(reference_markdown().c_str(), stdout);
  return kExitOk;
}

}  // namespace u3d
