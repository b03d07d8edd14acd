// `trainer evaluate <task>`: scores of predictions against references (segmentation, surface, cv,
// openkbp), each subcommand with its options.
#include <array>
#include <string>

#include "cli_commands.h"
#include "cli_options.h"
#include "u3d/app/commands.h"

namespace u3d_cli {
namespace {

// The options of a command that scores predictions against references: {--reference, --predictions,
// --out, --force, --threads} with their help texts.
template <class Command>
void add_scoring_options(CLI::App* a, Command& c, const std::array<std::string, 5>& docs) {
  a->add_option("--reference", c.reference, docs[0])->required();
  a->add_option("--predictions", c.predictions, docs[1])->required();
  a->add_option("--out", c.out, docs[2]);
  add_force(a, c.force, docs[3]);
  add_threads(a, c.threads, docs[4]);
}
void add_only_predicted(CLI::App* a, bool& only) {
  a->add_flag("--only-predicted", only, "Score only the reference cases that have a prediction");
}

void add_evaluate_segmentation(CLI::App* evaluate, Commands& commands) {
  auto [a, c] = commands.add<u3d::EvaluateSegmentationCommand>(
      *evaluate, "segmentation", "Per-class Dice and HD95 (mm) of NIfTI label files, per case",
      u3d::evaluate_segmentation_command);
  add_scoring_options(
      a, c,
      {"Folder of reference labels", "Folder of predicted labels (same case names)",
       "CSV file; default <predictions>/evaluation.csv", "Replace an existing CSV", "Threads; 0: every core"});
  a->add_option("--labels", c.labels, "Label values to score; default: every foreground value found")
      ->check(number_in(0, 2147483647, Whole::kYes))
      ->delimiter(',');
  add_only_predicted(a, c.only_predicted);
}

void add_evaluate_surface(CLI::App* evaluate, Commands& commands) {
  auto [a, c] = commands.add<u3d::EvaluateSurfaceCommand>(
      *evaluate, "surface",
      "Surface Dice, VOI, Betti numbers and TopoScore of thin-surface label files (NIfTI), per case",
      u3d::evaluate_surface_command);
  add_scoring_options(a, c,
                      {"Folder of reference labels", "Folder of predicted 0/1 labels (same case names)",
                       "CSV file; default <predictions>/surface_evaluation.csv", "Replace an existing CSV",
                       "Cases at once; 0: every core"});
  a->add_option("--tolerance", c.tolerance, "Surface Dice tolerance in voxels")
      ->check(number_in(0, 1e6, Whole::kNo))
      ->capture_default_str();
  a->add_option("--ignore-label", c.ignore_label, "Reference label excluded from every metric; -1: none")
      ->check(number_in(-1, 255, Whole::kYes))
      ->capture_default_str();
  add_only_predicted(a, c.only_predicted);
}

void add_evaluate_cv(CLI::App* evaluate, Commands& commands) {
  auto [a, c] = commands.add<u3d::EvaluateCvCommand>(
      *evaluate, "cv", "Cross-validation summary: per-fold and pooled metrics of each fold's held-out predictions",
      u3d::evaluate_cv_command);
  a->add_option("experiment", c.experiment, "<output_dir>/<name>, the folder of fold_K")->required();
  a->add_option("--out", c.out, "CSV file; default <experiment>/cv_summary.csv");
}

void add_evaluate_openkbp(CLI::App* evaluate, Commands& commands) {
  auto [a, c] = commands.add<u3d::EvaluateOpenKbpCommand>(*evaluate, "openkbp", "OpenKBP dose score and DVH score",
                                                          u3d::evaluate_openkbp_command);
  add_scoring_options(a, c,
                      {"Folder of pt_* folders with dose.csv",
                       "Folder of pt_*.csv submission files, or a predictions .h5 of --predict-only",
                       "Per-patient CSV (default beside PRED: <folder>_scores.csv or <file stem>_openkbp_scores.csv)",
                       "Replace existing output files", "Threads; 0: every core"});
}

}  // namespace

void add_evaluate_commands(CLI::App& app, Commands& commands) {
  auto* evaluate = app.add_subcommand("evaluate", "Score predictions against references");
  evaluate->require_subcommand(1);
  add_evaluate_segmentation(evaluate, commands);
  add_evaluate_surface(evaluate, commands);
  add_evaluate_cv(evaluate, commands);
  add_evaluate_openkbp(evaluate, commands);
}

}  // namespace u3d_cli
