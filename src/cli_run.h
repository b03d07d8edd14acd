// The run family of the command line (src/main.cpp adds it beside the table of cli_commands.h): the
// subcommands `train`, `resume`, `predict` and `benchmark`, and the root flags they replace, which
// stay as aliases: `trainer --config X` = `trainer train -c X`, `--config X --resume [CKPT]` =
// `resume -c X [CKPT]`, `--config X --predict-only` = `predict -c X`, `--config X --benchmark [KIND]`
// = `benchmark [KIND] -c X`. `predict -i IN -o OUT --run RUN` predicts raw files (no config).
// Every form fills one RunCommand (or PredictFilesCommand) that the library runs.
#pragma once
#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "cli_options.h"
#include "u3d/app/commands.h"
#include "u3d/core/errors.h"
#include "u3d/core/logging.h"

namespace u3d_cli {

struct RunCli {
  u3d::RunCommand run;
  u3d::PredictFilesCommand files;
  std::string resume_path;     // --resume [CHECKPOINT] | resume [CHECKPOINT]
  std::string benchmark_kind;  // --benchmark [KIND] | benchmark [KIND]
  CLI::App *train = nullptr, *resume = nullptr, *predict = nullptr, *benchmark = nullptr;
  CLI::Option *resume_flag = nullptr, *benchmark_flag = nullptr;
  std::vector<CLI::Option*> steps, checkpoint;  // --steps/--warmup, --checkpoint of every form
  std::vector<CLI::Option*> config_mode;        // predict's --config, --set, --ensemble: not with -i
};

// -c/--config, --set and --fold, which every form of a run takes.
inline void add_config_options(CLI::App* a, u3d::RunCommand& run, bool config_required) {
  a->add_option("-c,--config", run.config, "Experiment config (YAML)")->required(config_required);
  a->add_option("--set", run.overrides, "Override a config key: --set training.epochs=3 (repeatable)")
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
  a->add_option("--fold", run.fold,
                "Cross-validation fold (data.folds): K, or all (train every fold in turn; predicting: the ensemble "
                "of every fold)");
}
inline CLI::Option* add_checkpoint_option(CLI::App* a, RunCli& c, const std::string& doc) {
  c.checkpoint.push_back(a->add_option("--checkpoint", c.run.checkpoint, doc));
  return c.checkpoint.back();
}
inline void add_ensemble_option(CLI::App* a, RunCli& c, const std::string& doc) {
  a->add_option("--ensemble", c.run.ensemble, doc)
      ->delimiter(',')
      ->expected(1)
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}
inline void add_allow_option(CLI::App* a, RunCli& c) {
  a->add_option("--allow-config-change", c.run.allow_config_change,
                "Config keys that may differ from the checkpoint's (KEY[,KEY...], or section.*)")
      ->expected(1)
      ->delimiter(',')
      ->multi_option_policy(CLI::MultiOptionPolicy::TakeAll);
}
inline void add_benchmark_options(CLI::App* a, RunCli& c) {
  a->add_option("--workers", c.run.workers, "Benchmark data: sampler thread counts to measure, e.g. 1,2,4");
  a->add_flag("--profile", c.run.profile, "Benchmark (step): time 3 more steps under LibTorch's profiler, by category");
  a->add_option("--benchmark-seconds", c.run.benchmark_seconds, "Benchmark: seconds measured per result row")
      ->check(number_in(0, kMaxSeconds, Whole::kNo, /*lo_open=*/true));
  c.steps.push_back(a->add_option("--steps", c.run.steps, "Benchmark (step): timed steps")
                        ->check(number_in(1, kMaxCount, Whole::kYes))
                        ->capture_default_str());
  c.steps.push_back(a->add_option("--warmup", c.run.warmup, "Benchmark (step): untimed steps first")
                        ->check(number_in(0, kMaxCount, Whole::kYes))
                        ->capture_default_str());
}

// The root flags, grouped in --help as the aliases they are.
inline void add_root_aliases(CLI::App& app, RunCli& c) {
  const std::string group = "Run flags (the same as the train, resume, predict, benchmark commands)";
  const auto before = app.get_options().size();
  add_config_options(&app, c.run, /*config_required=*/false);
  c.resume_flag = app.add_option("--resume", c.resume_path,
                                 "= trainer resume: continue the run from its newest checkpoint, or CHECKPOINT")
                      ->expected(0, 1);
  add_allow_option(&app, c);
  app.add_flag("--predict-only", c.run.predict_only, "= trainer predict -c: predict predict.split with a checkpoint");
  add_checkpoint_option(&app, c, "With --predict-only: best (default), last or a path");
  add_ensemble_option(&app, c, "With --predict-only: run folders whose models are averaged, e.g. fold_0,fold_1");
  c.benchmark_flag = app.add_option("--benchmark", c.benchmark_kind,
                                    "= trainer benchmark: data (the batch pipeline alone), or no value / step (the "
                                    "training step alone, synthetic batches)")
                         ->expected(0, 1);
  add_benchmark_options(&app, c);
  for (size_t i = before; i < app.get_options().size(); ++i) app.get_options()[i]->group(group);
}

inline void add_train_command(CLI::App& app, RunCli& c) {
  c.train = app.add_subcommand("train", "Train a model: trainer train -c exp.yaml [--set KEY=VALUE] [--fold K|all]");
  add_config_options(c.train, c.run, /*config_required=*/true);
}

inline void add_resume_command(CLI::App& app, RunCli& c) {
  c.resume = app.add_subcommand("resume", "Continue a run from its newest checkpoint (or CHECKPOINT)");
  add_config_options(c.resume, c.run, /*config_required=*/true);
  c.resume->add_option("checkpoint", c.resume_path, "Checkpoint file; default the run's newest");
  add_allow_option(c.resume, c);
}

inline void add_predict_command(CLI::App& app, RunCli& c) {
  c.predict = app.add_subcommand(
      "predict",
      "Predict raw images (-i IN -o OUT --run RUN_DIR, as nnUNetv2_predict) or a config's split (-c exp.yaml)");
  auto* p = c.predict;
  add_config_options(p, c.run, /*config_required=*/false);
  add_ensemble_option(p, c, "With -c: run folders whose models are averaged, e.g. fold_0,fold_1");
  for (const char* name : {"--config", "--set", "--ensemble"}) c.config_mode.push_back(p->get_option(name));
  add_checkpoint_option(p, c, "best (default), last or a checkpoint path");
  p->add_option("-i,--input", c.files.inputs,
                "Folders or files: NIfTI NAME_0000.nii.gz (NAME_0001... per channel), 2D images (.png; .tif for a "
                "2D model), 3D TIFF volumes (.tif for a 3D model), or one folder of DICOM (a planning system's "
                "export: RT Dose or RT Structure Set out)")
      ->expected(1, -1);
  p->add_option("-o,--output", c.files.out,
                "With -i: folder of predictions in the inputs' format (made whole, or not at all)");
  p->add_option("--run", c.files.run, "With -i: a run folder, or an experiment folder of fold_K runs");
  p->add_option("--model", c.files.model, "With -i, instead of --run: a folder written by trainer export");
  p->add_option("--device", c.files.device, "With -i: auto | cpu | cuda; default the run's training.device")
      ->check(one_of({"auto", "cpu", "cuda"}));
  p->add_flag("--force", c.files.force, "With -i: replace a non-empty OUT");
  p->add_option("--structures", c.files.structures,
                "With -i on DICOM: the structure map (YAML) the run's data was imported with; default the run's "
                "channel (dose) or class (segmentation) names as the structure names");
}

inline void add_benchmark_command(CLI::App& app, RunCli& c) {
  c.benchmark = app.add_subcommand("benchmark", "Time the training step (step, default) or the batch pipeline (data)");
  c.benchmark->add_option("kind", c.benchmark_kind, "step | data")->check(one_of({"step", "data"}));
  add_config_options(c.benchmark, c.run, /*config_required=*/true);
  add_benchmark_options(c.benchmark, c);
}

// -v/--verbose (logging.level debug: every message, the full resolved config at start) and -q/--quiet
// (logging.level warn: warnings and errors only) on the root and on every command.
struct Verbosity {
  bool verbose = false, quiet = false;
};
inline void add_verbosity(CLI::App* a, Verbosity& v) {
  a->add_flag("-v,--verbose", v.verbose, "Every message (logging.level debug); the full resolved config at start");
  a->add_flag("-q,--quiet", v.quiet, "Warnings and errors only (logging.level warn)");
  for (auto* sub : a->get_subcommands({})) add_verbosity(sub, v);
}
// The level asked for, for the console now and for a run's config (an override after the user's --set).
inline void apply_verbosity(const Verbosity& v, RunCli& c) {
  if (v.verbose && v.quiet) throw u3d::UsageError("--verbose and --quiet cannot be combined");
  if (!v.verbose && !v.quiet) return;
  const std::string level = v.verbose ? "debug" : "warn";
  u3d::init_console_logging(level);
  c.run.overrides.push_back("logging.level=" + level);
}

inline bool any_given(const std::vector<CLI::Option*>& options) {
  for (const auto* o : options) {
    if (o->count() > 0) return true;
  }
  return false;
}

// Runs the form that was parsed (a run subcommand or the root flags). UsageError as run_command's.
inline int dispatch_run(const CLI::App& app, RunCli& c) {
  u3d::RunCommand& run = c.run;
  if (*c.predict && (!c.files.inputs.empty() || !c.files.run.empty() || !c.files.model.empty())) {
    if (any_given(c.config_mode)) {
      throw u3d::UsageError(
          "predict: -i/--run predicts raw files with the run's own settings; --config, --set and "
          "--ensemble go with predict -c (the config's split)");
    }
    c.files.checkpoint = run.checkpoint;
    c.files.fold = run.fold;
    if (c.files.inputs.empty()) throw u3d::UsageError("predict: --run and --model need -i, the images to predict");
    return u3d::predict_files_command(c.files);
  }
  if (*c.predict && (!c.files.out.empty() || !c.files.device.empty() || c.files.force || !c.files.structures.empty())) {
    throw u3d::UsageError(
        "predict: -o, --device, --force and --structures go with -i (raw files); predict -c writes into the run");
  }
  if (*c.predict) run.predict_only = true;
  if (c.resume_flag->count() > 0 || *c.resume) run.resume = c.resume_path;
  if (c.benchmark_flag->count() > 0 || *c.benchmark) run.benchmark = c.benchmark_kind;
  run.steps_given = any_given(c.steps);
  run.checkpoint_given = any_given(c.checkpoint);
  if (run.config.empty()) {
    std::fputs(app.help().c_str(), stderr);
    throw u3d::UsageError("--config is required (trainer train -c exp.yaml)");
  }
  return u3d::run_command(run);
}

}  // namespace u3d_cli
