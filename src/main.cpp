// trainer: parses the command line, dispatches to the library, and maps every failure to a
// one-line message and an exit code (0 ok, 1 runtime failure, 2 usage or config error).
#include <CLI/CLI.hpp>
#include <c10/util/Exception.h>
#include <spdlog/spdlog.h>

#include <new>

#include "u3d/commands.h"
#include "u3d/errors.h"
#include "u3d/logging.h"
#include "u3d/version.h"

namespace {

std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

int main(int argc, char** argv) {
  u3d::init_console_logging("info");
  CLI::App app{"trainer: fast 3D U-Net training for dose prediction and segmentation"};
  app.set_version_flag("--version", fmt::format("trainer {} ({})", u3d::version(), u3d::git_commit()));
  app.require_subcommand(0, 1);

  u3d::RunCommand run;
  app.add_option("-c,--config", run.config, "Experiment config (YAML)");
  std::string resume_path;
  auto* resume = app.add_option("--resume", resume_path, "Continue the run from its newest checkpoint, or CHECKPOINT")
                     ->expected(0, 1);
  app.add_flag("--predict-only", run.predict_only, "Predict predict.split with a checkpoint into <run>/predictions/");
  app.add_option("--checkpoint", run.checkpoint, "With --predict-only: best (default), last or a path");
  std::string benchmark_kind;
  auto* benchmark = app.add_option("--benchmark", benchmark_kind,
                                   "Benchmark instead of training: data (the batch pipeline alone, no model), or "
                                   "no value / step (the training step alone, synthetic batches)")
                        ->expected(0, 1);
  app.add_option("--workers", run.workers, "With --benchmark data: sampler thread counts to measure, e.g. 1,2,4");
  app.add_option("--benchmark-seconds", run.benchmark_seconds, "With --benchmark: seconds measured per result row")
      ->check(CLI::PositiveNumber);
  auto* steps_opt = app.add_option("--steps", run.steps, "With --benchmark (step): timed steps")
                       ->check(CLI::PositiveNumber)
                       ->capture_default_str();
  auto* warmup_opt = app.add_option("--warmup", run.warmup, "With --benchmark (step): untimed steps first")
                        ->check(CLI::NonNegativeNumber)
                        ->capture_default_str();
  app.add_option("--set", run.overrides, "Override a config key: --set training.epochs=3 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  app.add_option("--allow-config-change", run.allow_config_change,
                 "With --resume: config keys that may differ from the checkpoint's (KEY[,KEY...], or section.*)")
      ->expected(1)
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);

  u3d::SynthCommand synth;
  auto* synth_app = app.add_subcommand("synth", "Make a phantom dataset (HDF5, format v1)");
  synth_app->add_option("--task", synth.task, "dose | segmentation")->capture_default_str();
  synth_app->add_option("--cases", synth.cases, "Number of cases")->capture_default_str();
  synth_app->add_option("--size", synth.size, "Volume size: S or D,H,W voxels")->capture_default_str();
  synth_app->add_option("--out", synth.out, "Output file")->required();
  synth_app->add_option("--seed", synth.seed, "Seed")->capture_default_str();
  synth_app->add_option("--val-fraction", synth.val_fraction, "Share of cases in 'val'")->capture_default_str();
  synth_app->add_option("--test-fraction", synth.test_fraction, "Share of cases in 'test'")->capture_default_str();
  synth_app->add_flag("--force", synth.force, "Replace an existing output file");

  auto* reference_app = app.add_subcommand("config-reference", "Print every config key as Markdown");

  u3d::CheckDataCommand check;
  auto* check_app = app.add_subcommand("check-data", "Read every case of a dataset in full and report every problem");
  check_app->add_option("file", check.file, "Dataset file (HDF5, format v1)")->required();
  check_app->add_option("--split", check.split, "Check only this split's cases");
  check_app->add_option("--threads", check.threads, "Reader threads; 0: cores - 1")->capture_default_str();

  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? u3d::kExitOk : u3d::kExitUsage;
  }

  try {
    if (*synth_app) return u3d::synth_command(synth);
    if (*reference_app) return u3d::config_reference_command();
    if (*check_app) return u3d::check_data_command(check);
    if (resume->count() > 0) run.resume = resume_path;
    if (benchmark->count() > 0) run.benchmark = benchmark_kind;
    run.steps_given = steps_opt->count() > 0 || warmup_opt->count() > 0;
    if (run.config.empty()) {
      std::fputs(app.help().c_str(), stderr);
      throw u3d::UsageError("--config is required (trainer --config exp.yaml)");
    }
    return u3d::run_command(run);
  } catch (const u3d::Error& e) {
    spdlog::error("{}", first_line(e.what()));
    u3d::flush_logs();
    return e.exit_code();
  } catch (const c10::Error& e) {
    spdlog::error("LibTorch: {}", first_line(e.what_without_backtrace()));
    u3d::flush_logs();
    return u3d::kExitRuntime;
  } catch (const std::bad_alloc&) {
    spdlog::error("out of host memory; lower data.batch_size or data.patch_size");
    u3d::flush_logs();
    return u3d::kExitRuntime;
  } catch (const std::exception& e) {
    spdlog::error("{}", first_line(e.what()));
    u3d::flush_logs();
    return u3d::kExitRuntime;
  }
}
