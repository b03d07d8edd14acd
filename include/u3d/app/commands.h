// The trainer's commands, called by src/main.cpp after parsing. Each returns the exit code and
// lets u3d::Error propagate (main maps it to a one-line message and its exit code).
#pragma once
#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

namespace u3d {

struct Config;

struct RunCommand {
  std::string config;                            // --config
  std::vector<std::string> overrides;            // --set key=value, in order
  std::optional<std::string> resume;             // --resume [CHECKPOINT]; "" = newest
  bool predict_only = false;                     // --predict-only
  std::string checkpoint = "best";               // --checkpoint best|last|PATH (with --predict-only)
  bool checkpoint_given = false;                 // --checkpoint was passed
  std::vector<std::string> allow_config_change;  // --allow-config-change KEY[,KEY...] (with --resume)
  // --fold K|all: experiment.fold (cross-validation, data/folds.h); all trains every fold in turn,
  // or with --predict-only predicts with the ensemble of every fold.
  std::string fold;
  // --ensemble RUN[,RUN...] (with --predict-only): run folders (fold_0, ... under <output_dir>/<name>,
  // or paths) whose models are averaged (predict/ensemble.h) into <output_dir>/<name>/ensemble/predictions/.
  std::vector<std::string> ensemble;
  // --benchmark [KIND]: "data" runs the batch pipeline alone; "" (no value) or "step" times the
  // training step (benchmark.h).
  std::optional<std::string> benchmark;
  int64_t steps = 20;              // --steps: timed steps (with --benchmark step)
  int64_t warmup = 5;              // --warmup: untimed steps first (with --benchmark step)
  bool steps_given = false;        // --steps or --warmup was passed
  std::string workers;             // --workers 1,2,4 (with --benchmark data)
  double benchmark_seconds = 3.0;  // --benchmark-seconds: measured time per benchmark row
  bool profile = false;            // --profile: the step benchmark's breakdown by category
};
// Exit code 0, or 128 + signal when a stop signal ended training early (after its checkpoint).
int run_command(const RunCommand& cmd);
// `trainer --predict-only` (run_command; src/app/predict_command.cpp): predicts cfg.predict.split of cfg.data.path with
// the chosen checkpoint
// ("best", "last" or a path) into <run>/predictions/<split>.h5 and, when the cases have targets,
// writes <split>_metrics.csv (per case, with the "predict the mean" baseline) and logs the means.
// With cross-validation (experiment.fold K) the split "val" is fold K's held-out cases.
void run_prediction(const Config& cfg, const std::string& checkpoint);
// The same with the ensemble of the run folders `members` (each its `checkpoint`: best, last or a
// path), into <output_dir>/<name>/ensemble/predictions/ (returned).
std::filesystem::path run_ensemble_prediction(const Config& cfg, const std::vector<std::string>& members,
                                              const std::string& checkpoint);

// `trainer predict -i IN... -o OUT --run RUN_DIR [--fold N|all] [--checkpoint best|last|FILE]` or
// `--model EXPORT_DIR` (the folder `trainer export` writes) instead of --run
// (src/app/predict_files_command.cpp): raw NIfTI images predicted as nnUNetv2_predict does, with no
// import and no config (everything comes from the checkpoints). IN: folders and/or files named
// NAME_0000.nii.gz, NAME_0001.nii.gz, ... (one per input channel, predict/raw_cases.h); OUT gets
// NAME.nii.gz (NAME.nii for .nii inputs), uint8 labels in the input's grid with its header. --run: a run
// folder, or a cross-validation experiment (<output_dir>/<name>) whose fold_K runs are averaged (all,
// nnU-Net's default, or --fold N). OUT is written whole or not at all; an existing non-empty OUT
// needs --force.
struct PredictFilesCommand {
  std::vector<std::string> inputs;  // -i
  std::string out;                  // -o
  std::string run;                  // --run (or --model)
  std::string model;                // --model: a folder of `trainer export` (predict/exported_model.h)
  std::string checkpoint = "best";  // --checkpoint best|last|FILE of each run
  std::string fold;                 // --fold N|all; "": the run, or every fold of an experiment
  std::string device;               // --device auto|cpu|cuda; "": the run's training.device
  bool force = false;               // --force: replace a non-empty OUT
  std::string structures;           // --structures map.yaml for DICOM inputs; "": the run's names
};
int predict_files_command(const PredictFilesCommand& cmd);

struct CheckDataCommand {
  std::string file;     // dataset (HDF5, format v1)
  std::string split;    // only this split's cases; empty: every case in the file
  int64_t threads = 0;  // 0: cores - 1
};
// `trainer check-data FILE`: reads every case in full and prints each problem (file, case, field)
// and a summary. Exit 0 when no case has an error (warnings allowed), 1 otherwise.
int check_data_command(const CheckDataCommand& cmd);

struct SynthCommand {
  std::string task = "dose";  // dose|segmentation|surface (segmentation phantoms of thin sheets)
  int64_t cases = 24;
  std::string size = "32";  // "S" or "D,H,W"
  std::string out;
  uint64_t seed = 0;
  double val_fraction = 0.25;
  double test_fraction = 0.0;
  bool force = false;  // replace an existing file
  // h5 | nnunet (segmentation: an nnU-Net v2 raw folder of NIfTI files) | tiff (segmentation:
  // <out>/images/<id>.tif and <out>/labels/<id>.tif, io/tiff/tiff.h)
  std::string format = "h5";
};
int synth_command(const SynthCommand& cmd);

// Prints the configuration reference (Markdown) to stdout.
int config_reference_command();

// `trainer import openkbp --source DIR --out FILE.h5 [--force] [--threads N]` (src/app/openkbp_commands.cpp).
struct ImportOpenKbpCommand {
  std::string source;         // provided-data folder or a folder of pt_* folders
  std::string out;            // dataset file (format v1)
  bool force = false;         // replace an existing file
  int64_t threads = 0;        // parsing threads; 0: every core
  std::string split = "all";  // split name for a plain folder of pt_* folders
};
int import_openkbp_command(const ImportOpenKbpCommand& cmd);

// `trainer evaluate openkbp --reference DIR --predictions PRED [--out FILE.csv] [--force]`: the
// challenge's dose and DVH scores of PRED (a folder of pt_*.csv submission files or a predictions
// HDF5 file of --predict-only) against the pt_* folders in DIR; prints both scores and writes a
// per-patient CSV (and the DVH metrics beside it, <out stem>_dvh.csv).
struct EvaluateOpenKbpCommand {
  std::string reference;
  std::string predictions;
  std::string out;      // default beside PRED: <folder>_scores.csv, or <file stem>_openkbp_scores.csv
  bool force = false;   // replace existing output files
  int64_t threads = 0;  // 0: every core
};
int evaluate_openkbp_command(const EvaluateOpenKbpCommand& cmd);

// Options shared by `trainer import nnunet`, `import nifti` and `import tiff` (include/u3d/io/import.h).
struct ImportCommon {
  std::string out;                     // --out FILE.h5
  std::string spacing;                 // --spacing S or D,H,W (mm); "": keep each case's grid
  std::vector<std::string> normalize;  // --normalize ct|zscore|minmax|none|SPEC, one or one per channel
  double val_fraction = 0.2;           // --val-fraction
  uint64_t seed = 0;                   // --seed (val selection)
  int64_t threads = 0;                 // --threads; 0: every core
  bool force = false;                  // --force: replace an existing output file
};
struct ImportNnunetCommand {
  std::string source;  // --source DatasetXXX_Name (nnU-Net raw folder)
  ImportCommon common;
};
int import_nnunet_command(const ImportNnunetCommand& cmd);
struct ImportNiftiCommand {
  std::string images, labels;                 // --images DIR, --labels DIR (optional)
  std::vector<std::string> channel_suffixes;  // --channel-suffixes _0000,_0001
  std::vector<std::string> channel_names;     // --channel-names t1,flair
  std::vector<std::string> classes;           // --classes background,liver,...
  ImportCommon common;
};
int import_nifti_command(const ImportNiftiCommand& cmd);
// `trainer import tiff --images DIR [--labels DIR] --out FILE.h5 [--ignore-label N] [--spacing S|D,H,W]`
// (io/import.h, import_tiff): folders of 3D TIFF volumes paired by name.
struct ImportTiffCommand {
  std::string images, labels;  // --images DIR, --labels DIR (optional: without, every case goes to 'test')
  int64_t ignore_label = -1;   // --ignore-label N: the label of unlabeled voxels (e.g. 2); -1: none
  // --out, --val-fraction, --seed, --threads, --force as for NIfTI; --spacing is the volumes' voxel
  // size (TIFF records none; default 1,1,1 mm), nothing is resampled; --normalize is not used (zscore).
  ImportCommon common;
};
int import_tiff_command(const ImportTiffCommand& cmd);

// `trainer evaluate segmentation` (include/u3d/segmentation_eval.h).
struct EvaluateSegmentationCommand {
  std::string reference, predictions;  // --reference DIR, --predictions DIR
  std::string out;                     // --out CSV; default <predictions>/evaluation.csv
  std::vector<int64_t> labels;         // --labels 1,2; default: every foreground value found
  int64_t threads = 0;
  bool force = false;           // replace an existing CSV
  bool only_predicted = false;  // --only-predicted: reference cases without a prediction are not an error
};
int evaluate_segmentation_command(const EvaluateSegmentationCommand& cmd);

// `trainer evaluate surface` (evaluate/surface_eval.h): Surface Dice, VOI, Betti numbers, TopoScore and
// the surface-detection total per case and mean; CSV default <predictions>/surface_evaluation.csv.
struct EvaluateSurfaceCommand {
  std::string reference, predictions;  // --reference DIR, --predictions DIR
  std::string out;                     // --out CSV
  double tolerance = 2.0;              // --tolerance (voxels)
  int64_t ignore_label = 2;            // --ignore-label; -1: none
  int64_t threads = 0;
  bool force = false;           // replace an existing CSV
  bool only_predicted = false;  // --only-predicted: reference cases without a prediction are not an error
};
int evaluate_surface_command(const EvaluateSurfaceCommand& cmd);

// `trainer export RUN_DIR` (src/app/export_command.cpp, model/model_export.h): the checkpoint
// (best, last or a path) as model.safetensors, model.pt, model.ts and, through
// scripts/python/export_onnx.py, model.onnx in --out (default <run>/export/). Files of formats not
// asked for are removed, so the folder holds one export.
struct ExportCommand {
  std::string run_dir;
  std::string checkpoint = "best";
  std::vector<std::string> formats = {"safetensors", "pt", "torchscript"};
  std::string out;
};
int export_command(const ExportCommand& cmd);

// `trainer evaluate cv EXPERIMENT_DIR [--out FILE.csv]` (evaluate/cross_validation.h): per-fold and
// pooled validation metrics of a cross-validation from each fold_K/predictions/val_metrics.csv.
struct EvaluateCvCommand {
  std::string experiment;  // <output_dir>/<name>, the folder of fold_0 .. fold_K-1
  std::string out;         // default <experiment>/cv_summary.csv
};
int evaluate_cv_command(const EvaluateCvCommand& cmd);

// `trainer plan DATA.h5 [--gpu-memory GiB | --device cuda] [--memory-model bytes|nnunet] [--task auto]
// [--out exp.yaml]` (src/app/plan_command.cpp, plan/planner.h): the dataset's fingerprint (printed;
// kept beside the file as <data>.fingerprint.json) and commented YAML experiments: 3d_fullres, 2d
// (<out stem>_2d.yaml) and, when the patch covers less than 1/4 of the median volume, nnU-Net's
// 3d_lowres (<out stem>_lowres.yaml) and 3d_cascade_fullres (<out stem>_cascade.yaml).
struct PlanCommand {
  std::string data;
  double gpu_memory_gib = 0;           // 0: --device cuda measures the device, else 80 GiB assumed
  std::string device = "cpu";          // cpu: the memory model; cuda: candidates measured on the GPU
  std::string memory_model = "bytes";  // PlanOptions::memory_model
  bool renormalize = false;            // PlanOptions::renormalize
  std::string task = "auto";           // auto | segmentation | dose
  std::string out;                     // default <data stem>_plan.yaml
  std::string name;                    // experiment.name; default the data file's stem
  int64_t threads = 0;                 // fingerprint threads; 0: every core
  std::vector<std::string> splits;     // --split: fingerprint these splits' cases only (not stored); empty: every case
  bool force = false;                  // replace existing outputs
};
int plan_command(const PlanCommand& cmd);

// `trainer cascade --previous runs/NAME_lowres --data DATA.h5 --out DATA_cascade.h5 [--force]`
// (src/app/segmentation_commands.cpp, predict/cascade_data.h): the second stage's dataset of nnU-Net's
// cascade, the first stage's out-of-fold (and test) segmentations added as input channels.
struct CascadeCommand {
  std::string previous;  // the first stage's experiment folder (folds.json, fold_K/predictions/val.h5)
  std::string data;      // the full-resolution dataset
  std::string out;
  int64_t threads = 0;
  bool force = false;
};
int cascade_command(const CascadeCommand& cmd);

// `trainer plot RUN_DIR [--out FILE.png]`: progress.png and progress.svg from <run>/metrics.csv
// (monitor/progress_plot.h), also for a run still going or written by an older version.
struct PlotCommand {
  std::string run_dir;
  std::string out;  // default <run>/progress.png; the .svg beside it
};
int plot_command(const PlotCommand& cmd);

}  // namespace u3d
