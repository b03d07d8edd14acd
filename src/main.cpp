// trainer: parses the command line, dispatches to the library, and maps every failure to a
// one-line message and an exit code (0 ok, 1 runtime failure, 2 usage or config error).
#include <ATen/detail/CUDAHooksInterface.h>
#include <c10/util/Exception.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <functional>
#include <new>
#include <string>

#include "cli_options.h"
#include "cli_run.h"
#include "u3d/app/commands.h"
#include "u3d/app/dicom_command.h"
#include "u3d/app/images_command.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/launch_env.h"
#include "u3d/core/logging.h"
#include "u3d/core/parallel.h"
#include "u3d/core/text.h"
#include "u3d/core/version.h"

using namespace u3d_cli;  // NOLINT: the command line's own helpers (cli_options.h, cli_run.h)

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

// The options of an `evaluate` command that scores predictions against references:
// {--reference, --predictions, --out, --force} with their help texts.
template <class Command>
void add_scoring_options(CLI::App* app, Command& cmd, const std::array<std::string, 4>& docs) {
  app->add_option("--reference", cmd.reference, docs[0])->required();
  app->add_option("--predictions", cmd.predictions, docs[1])->required();
  app->add_option("--out", cmd.out, docs[2]);
  app->add_flag("--force", cmd.force, docs[3]);
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

  // Commands in workflow order (as --help lists them); each block below adds its options.
  auto* synth_app = app.add_subcommand("synth", "Make a phantom dataset (HDF5, format v1)");
  auto* import_app = app.add_subcommand("import", "Convert external data into a dataset file (HDF5, format v1)");
  auto* check_app = app.add_subcommand("check-data", "Read every case of a dataset in full and report every problem");
  auto* plan_app = app.add_subcommand(
      "plan", "Plan an experiment for a dataset: fingerprint, spacing, network, patch and batch for the GPU memory");
  auto* cascade_app = app.add_subcommand(
      "cascade", "Add the first stage's (3d_lowres) segmentations to a dataset as input channels (nnU-Net's cascade)");
  RunCli rc;
  add_root_aliases(app, rc);
  add_train_command(app, rc);
  add_resume_command(app, rc);
  add_predict_command(app, rc);
  auto* evaluate_app = app.add_subcommand("evaluate", "Score predictions against references");
  auto* export_app = app.add_subcommand(
      "export", "Write a run's checkpoint as model.safetensors, model.pt, model.ts (and model.onnx) for PyTorch");
  add_benchmark_command(app, rc);
  auto* plot_app = app.add_subcommand("plot", "Draw <run>/progress.png and .svg from metrics.csv");
  auto* reference_app = app.add_subcommand("config-reference", "Print every config key as Markdown");

  u3d::SynthCommand synth;
  synth_app
      ->add_option("--task", synth.task, "dose | segmentation | surface | kits (KiTS19-like CT, 1.6 mm, varied sizes)")
      ->capture_default_str();
  synth_app->add_option("--cases", synth.cases, "Number of cases")
      ->check(number_in(0, kMaxCount, Whole::kYes))
      ->capture_default_str();
  synth_app->add_option("--size", synth.size, "Volume size: S or D,H,W voxels")->capture_default_str();
  synth_app->add_option("--out", synth.out, "Output file")->required();
  synth_app->add_option("--seed", synth.seed, "Seed")
      ->check(number_in(0, kMaxSeed, Whole::kYes))
      ->capture_default_str();
  synth_app->add_option("--val-fraction", synth.val_fraction, "Share of cases in 'val'")
      ->check(number_in(0, 1, Whole::kNo))
      ->capture_default_str();
  synth_app->add_option("--test-fraction", synth.test_fraction, "Share of cases in 'test'")
      ->check(number_in(0, 1, Whole::kNo))
      ->capture_default_str();
  synth_app->add_flag("--force", synth.force, "Replace an existing output file");
  synth_app
      ->add_option("--format", synth.format,
                   "h5 (dataset file) | nnunet (segmentation: nnU-Net raw folder of NIfTI files) | tiff "
                   "(segmentation: folders images/ and labels/ of 3D TIFF volumes) | png (segmentation: one folder "
                   "of 2D slices <case>_<z>.png with <case>_<z>_mask.png, trainer import images' layout)")
      ->capture_default_str();

  u3d::CheckDataCommand check;
  check_app->add_option("file", check.file, "Dataset file (HDF5, format v1)")->required();
  check_app->add_option("--split", check.split, "Check only this split's cases");
  check_app->add_option("--threads", check.threads, "Reader threads; 0: cores - 1")
      ->check(kThreadCount)
      ->capture_default_str();
  // trainer import <format>: external data -> dataset file (HDF5, format v1)
  import_app->require_subcommand(1);
  auto add_import_common = [](CLI::App* sub, u3d::ImportCommon& c) {
    sub->add_option("--out", c.out, "Output dataset file (.h5)")->required();
    sub->add_option("--spacing", c.spacing, "Resample to this voxel size in mm: S or D,H,W (= NIfTI z,y,x)");
    sub->add_option("--normalize", c.normalize,
                    "Per channel (one: all): ct | zscore | minmax | none | a data.normalize spec; default from the "
                    "channel names as nnU-Net (CT -> ct, else zscore)")
        ->delimiter(',');
    sub->add_option("--val-fraction", c.val_fraction, "Share of labelled cases in split 'val'")
        ->check(number_in(0, 1, Whole::kNo))
        ->capture_default_str();
    sub->add_option("--seed", c.seed, "Seed of the val selection")
        ->check(number_in(0, kMaxSeed, Whole::kYes))
        ->capture_default_str();
    sub->add_option("--threads", c.threads, "Threads; 0: every core")->check(kThreadCount)->capture_default_str();
    sub->add_flag("--force", c.force, "Replace an existing output file");
  };
  u3d::ImportNnunetCommand import_nnunet;
  auto* import_nnunet_app = import_app->add_subcommand("nnunet",
                                                       "nnU-Net v2 raw dataset (dataset.json, imagesTr, "
                                                       "labelsTr, imagesTs; NIfTI)");
  import_nnunet_app->add_option("--source", import_nnunet.source, "DatasetXXX_Name folder")->required();
  add_import_common(import_nnunet_app, import_nnunet.common);
  u3d::ImportNiftiCommand import_nifti;
  auto* import_nifti_app = import_app->add_subcommand("nifti", "Plain folders of NIfTI images and labels");
  import_nifti_app->add_option("--images", import_nifti.images, "Folder of images (.nii.gz, .nii)")->required();
  import_nifti_app->add_option("--labels", import_nifti.labels, "Folder of <case>.nii.gz label files (optional)");
  import_nifti_app
      ->add_option("--channel-suffixes", import_nifti.channel_suffixes,
                   "Channels by file-name suffix, e.g. _0000,_0001; default: one channel")
      ->delimiter(',');
  import_nifti_app->add_option("--channel-names", import_nifti.channel_names, "Channel names, e.g. t1,flair")
      ->delimiter(',');
  import_nifti_app
      ->add_option("--classes", import_nifti.classes, "Class names, background first; default: found from the labels")
      ->delimiter(',');
  add_import_common(import_nifti_app, import_nifti.common);
  u3d::ImportTiffCommand import_tiff;
  auto* import_tiff_app = import_app->add_subcommand(
      "tiff", "Folders of 3D TIFF volumes (multi-page, one page per slice), images and labels paired by name");
  import_tiff_app->add_option("--images", import_tiff.images, "Folder of images (.tif, .tiff)")->required();
  import_tiff_app->add_option("--labels", import_tiff.labels, "Folder of label volumes named as the images (optional)");
  import_tiff_app->add_option("--out", import_tiff.common.out, "Output dataset file (.h5)")->required();
  import_tiff_app
      ->add_option("--ignore-label", import_tiff.ignore_label,
                   "Label of unlabeled voxels (e.g. 2), excluded from losses and metrics; -1: none")
      ->check(number_in(-1, 255, Whole::kYes))
      ->capture_default_str();
  import_tiff_app->add_option("--spacing", import_tiff.common.spacing,
                              "Voxel size of the volumes in mm: S or D,H,W (TIFF records none; default 1)");
  import_tiff_app
      ->add_option("--val-fraction", import_tiff.common.val_fraction, "Share of labelled cases in split 'val'")
      ->check(number_in(0, 1, Whole::kNo))
      ->capture_default_str();
  import_tiff_app->add_option("--seed", import_tiff.common.seed, "Seed of the val selection")
      ->check(number_in(0, kMaxSeed, Whole::kYes))
      ->capture_default_str();
  import_tiff_app->add_option("--threads", import_tiff.common.threads, "Threads; 0: every core")
      ->check(kThreadCount)
      ->capture_default_str();
  import_tiff_app->add_flag("--force", import_tiff.common.force, "Replace an existing output file");

  u3d::ImportOpenKbpCommand import_openkbp;
  auto* import_openkbp_app =
      import_app->add_subcommand("openkbp", "OpenKBP CSV folders (provided-data or pt_* folders)");
  import_openkbp_app->add_option("--source", import_openkbp.source, "provided-data folder or a folder of pt_* folders")
      ->required();
  import_openkbp_app->add_option("--out", import_openkbp.out, "Output dataset file (.h5)")->required();
  import_openkbp_app->add_flag("--force", import_openkbp.force, "Replace an existing output file");
  import_openkbp_app->add_option("--threads", import_openkbp.threads, "Parsing threads; 0: every core")
      ->check(kThreadCount)
      ->capture_default_str();
  import_openkbp_app->add_option("--split", import_openkbp.split, "Split name for a plain folder of pt_* folders")
      ->capture_default_str();

  u3d::ImportDicomCommand import_dicom;  // docs/dicom.md
  auto* import_dicom_app =
      import_app->add_subcommand("dicom", "DICOM / DICOM-RT folder tree (CT or MR series, RT Structure Set, RT Dose)");
  import_dicom_app->add_option("--source", import_dicom.source, "Folder of DICOM files (any depth, any names)")
      ->required();
  import_dicom_app->add_option("--out", import_dicom.out, "Output dataset file (.h5)")->required();
  import_dicom_app->add_option("--task", import_dicom.task, "dose (RT Dose target) or segmentation (label map)")
      ->capture_default_str();
  import_dicom_app->add_option("--structures", import_dicom.structures, "YAML map 'channel: [structure names]'");
  import_dicom_app->add_option("--series", import_dicom.series, "SeriesInstanceUID of the image series to import");
  import_dicom_app->add_flag("--skip-bad", import_dicom.skip_bad,
                             "Leave out an unusable patient (one line) and go on: the default, kept as an alias");
  import_dicom_app->add_flag("--strict", import_dicom.strict, "Refuse the import if any patient is unusable");
  import_dicom_app->add_flag("--anonymize", import_dicom.anonymize, "Case ids case_000...; no names or paths written");
  import_dicom_app->add_option("--val-fraction", import_dicom.val_fraction, "Share of labelled cases in split 'val'")
      ->check(number_in(0, 1, Whole::kNo))
      ->capture_default_str();
  import_dicom_app->add_option("--seed", import_dicom.seed, "Seed of the val selection")->capture_default_str();
  import_dicom_app->add_flag("--force", import_dicom.force, "Replace an existing output file");

  u3d::ImportImagesCommand import_images;  // docs/slices.md
  auto* import_images_app = import_app->add_subcommand(
      "images", "Folders of 2D PNG/TIFF slices and masks paired by name, stacked into one case per patient");
  import_images_app->add_option("--images", import_images.options.images, "Folder of slices (.png, .tif, .tiff)")
      ->required();
  import_images_app->add_option("--labels", import_images.options.labels,
                                "Folder of masks (default: beside the images)");
  import_images_app->add_option("--out", import_images.out, "Output dataset file (.h5)")->required();
  import_images_app->add_option("--group", import_images.options.group,
                                "Regex whose one capture group names a slice's case (default: the name up to its last "
                                "_ or - digit run)");
  import_images_app->add_option("--mask-suffix", import_images.options.mask_suffix, "A mask's name: the image's + this")
      ->capture_default_str();
  import_images_app->add_flag("--skip-unpaired", import_images.options.skip_unpaired,
                              "Leave out images without mask and masks without image (one line)");
  import_images_app
      ->add_option("--val-fraction", import_images.options.val_fraction, "Share of the cases in split 'val'")
      ->check(number_in(0, 1, Whole::kNo))
      ->capture_default_str();
  import_images_app
      ->add_option("--test-fraction", import_images.options.test_fraction, "Share of the cases in split 'test'")
      ->check(number_in(0, 1, Whole::kNo))
      ->capture_default_str();
  import_images_app->add_option("--seed", import_images.options.seed, "Seed of the val and test selection")
      ->capture_default_str();
  import_images_app->add_option("--reference-out", import_images.options.reference_out,
                                "Also write each case's labels as DIR/<case>.tif (for evaluate segmentation)");
  import_images_app->add_option("--threads", import_images.options.threads, "Threads; 0: every core")
      ->check(kThreadCount)
      ->capture_default_str();
  import_images_app->add_flag("--force", import_images.force, "Replace an existing output file");

  // trainer evaluate <task>
  evaluate_app->require_subcommand(1);
  u3d::EvaluateSegmentationCommand evaluate_segmentation;
  auto* evaluate_segmentation_app =
      evaluate_app->add_subcommand("segmentation", "Per-class Dice and HD95 (mm) of NIfTI label files, per case");
  add_scoring_options(evaluate_segmentation_app, evaluate_segmentation,
                      {"Folder of reference labels", "Folder of predicted labels (same case names)",
                       "CSV file; default <predictions>/evaluation.csv", "Replace an existing CSV"});
  evaluate_segmentation_app
      ->add_option("--labels", evaluate_segmentation.labels,
                   "Label values to score; default: every foreground value found")
      ->check(number_in(0, 2147483647, Whole::kYes))
      ->delimiter(',');
  evaluate_segmentation_app->add_flag("--only-predicted", evaluate_segmentation.only_predicted,
                                      "Score only the reference cases that have a prediction");
  evaluate_segmentation_app->add_option("--threads", evaluate_segmentation.threads, "Threads; 0: every core")
      ->check(kThreadCount);
  u3d::EvaluateSurfaceCommand evaluate_surface;
  auto* evaluate_surface_app = evaluate_app->add_subcommand(
      "surface", "Surface Dice, VOI, Betti numbers and TopoScore of thin-surface label files (NIfTI), per case");
  add_scoring_options(evaluate_surface_app, evaluate_surface,
                      {"Folder of reference labels", "Folder of predicted 0/1 labels (same case names)",
                       "CSV file; default <predictions>/surface_evaluation.csv", "Replace an existing CSV"});
  evaluate_surface_app->add_option("--tolerance", evaluate_surface.tolerance, "Surface Dice tolerance in voxels")
      ->check(number_in(0, 1e6, Whole::kNo))
      ->capture_default_str();
  evaluate_surface_app
      ->add_option("--ignore-label", evaluate_surface.ignore_label,
                   "Reference label excluded from every metric; -1: none")
      ->check(number_in(-1, 255, Whole::kYes))
      ->capture_default_str();
  evaluate_surface_app->add_flag("--only-predicted", evaluate_surface.only_predicted,
                                 "Score only the reference cases that have a prediction");
  evaluate_surface_app->add_option("--threads", evaluate_surface.threads, "Cases at once; 0: every core")
      ->check(kThreadCount);
  u3d::EvaluateCvCommand evaluate_cv;
  auto* evaluate_cv_app = evaluate_app->add_subcommand(
      "cv", "Cross-validation summary: per-fold and pooled metrics of each fold's held-out predictions");
  evaluate_cv_app->add_option("experiment", evaluate_cv.experiment, "<output_dir>/<name>, the folder of fold_K")
      ->required();
  evaluate_cv_app->add_option("--out", evaluate_cv.out, "CSV file; default <experiment>/cv_summary.csv");
  u3d::EvaluateOpenKbpCommand evaluate_openkbp;
  auto* evaluate_openkbp_app = evaluate_app->add_subcommand("openkbp", "OpenKBP dose score and DVH score");
  add_scoring_options(evaluate_openkbp_app, evaluate_openkbp,
                      {"Folder of pt_* folders with dose.csv",
                       "Folder of pt_*.csv submission files, or a predictions .h5 of --predict-only",
                       "Per-patient CSV (default beside PRED: <folder>_scores.csv or <file stem>_openkbp_scores.csv)",
                       "Replace existing output files"});
  evaluate_openkbp_app->add_option("--threads", evaluate_openkbp.threads, "Threads; 0: every core")
      ->check(kThreadCount)
      ->capture_default_str();

  u3d::ExportCommand export_cmd;
  export_app->add_option("run_dir", export_cmd.run_dir, "Run folder (<output_dir>/<name>)")->required();
  export_app->add_option("--checkpoint", export_cmd.checkpoint, "best, last or a checkpoint path")
      ->capture_default_str();
  export_app
      ->add_option("--format", export_cmd.formats,
                   "Comma-separated: safetensors, pt, torchscript, onnx (onnx runs scripts/python/export_onnx.py "
                   "with U3D_PYTHON or python3)")
      ->delimiter(',')
      ->capture_default_str();
  export_app->add_option("--out", export_cmd.out, "Output folder (default <run>/export)");
  u3d::PlanCommand plan;
  plan_app->add_option("data", plan.data, "Dataset file (HDF5, format v1)")->required();
  plan_app
      ->add_option("--gpu-memory", plan.gpu_memory_gib,
                   "GPU memory budget in GiB (memory model); default 80 (--memory-model nnunet: 8)")
      ->check(number_in(0, kMaxGpuMemoryGib, Whole::kNo, /*lo_open=*/true));
  plan_app->add_option("--device", plan.device, "cpu (memory model) or cuda (measure candidates on the GPU)")
      ->capture_default_str();
  plan_app
      ->add_option("--memory-model", plan.memory_model,
                   "bytes (the step's bytes within 85% of the budget) or nnunet (nnU-Net's own model and batch rule: "
                   "its plan)")
      ->check(one_of({"bytes", "nnunet"}))
      ->capture_default_str();
  plan_app->add_flag("--renormalize", plan.renormalize,
                     "Normalisation from the fingerprint instead of what the importer recorded");
  plan_app->add_option("--task", plan.task, "auto | segmentation | dose")
      ->check(one_of({"auto", "segmentation", "dose"}))
      ->capture_default_str();
  plan_app->add_option("--out", plan.out,
                       "YAML config to write (3d_fullres); default <data stem>_plan.yaml; beside it <out stem>_2d.yaml "
                       "(2d) and, for large volumes, <out stem>_lowres.yaml");
  plan_app->add_option("--name", plan.name, "experiment.name; default the data file's stem");
  plan_app->add_option("--threads", plan.threads, "Fingerprint threads; 0: every core")
      ->check(kThreadCount)
      ->capture_default_str();
  plan_app
      ->add_option("--split", plan.splits, "Fingerprint only these splits' cases (comma-separated); default every case")
      ->delimiter(',');
  plan_app->add_flag("--force", plan.force, "Replace existing outputs");
  u3d::CascadeCommand cascade;
  cascade_app->add_option("--previous", cascade.previous, "The first stage's experiment folder (runs/NAME_lowres)")
      ->required();
  cascade_app->add_option("--data", cascade.data, "The full-resolution dataset (.h5)")->required();
  cascade_app->add_option("--out", cascade.out, "The second stage's dataset (.h5)")->required();
  cascade_app->add_option("--threads", cascade.threads, "Threads; 0: every core")
      ->check(kThreadCount)
      ->capture_default_str();
  cascade_app->add_flag("--force", cascade.force, "Replace an existing output file");
  u3d::PlotCommand plot;
  plot_app->add_option("run_dir", plot.run_dir, "Run folder")->required();
  plot_app->add_option("--out", plot.out, "PNG file (default <run>/progress.png; the .svg beside it)");

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
    if (*synth_app) return u3d::synth_command(synth);
    if (*reference_app) return u3d::config_reference_command();
    if (*check_app) return u3d::check_data_command(check);
    if (*import_openkbp_app) return u3d::import_openkbp_command(import_openkbp);
    if (*evaluate_openkbp_app) return u3d::evaluate_openkbp_command(evaluate_openkbp);
    if (*import_nnunet_app) return u3d::import_nnunet_command(import_nnunet);
    if (*import_nifti_app) return u3d::import_nifti_command(import_nifti);
    if (*import_tiff_app) return u3d::import_tiff_command(import_tiff);
    if (*import_dicom_app) return u3d::import_dicom_command(import_dicom);
    if (*import_images_app) return u3d::import_images_command(import_images);
    if (*evaluate_surface_app) return u3d::evaluate_surface_command(evaluate_surface);
    if (*evaluate_cv_app) return u3d::evaluate_cv_command(evaluate_cv);
    if (*evaluate_segmentation_app) return u3d::evaluate_segmentation_command(evaluate_segmentation);
    if (*export_app) return u3d::export_command(export_cmd);
    if (*plot_app) return u3d::plot_command(plot);
    if (*plan_app) return u3d::plan_command(plan);
    if (*cascade_app) return u3d::cascade_command(cascade);
    return dispatch_run(app, rc);
  } catch (const u3d::Error& e) {
    return report_failure(u3d::error_line(e), e.exit_code());
  } catch (const std::exception& e) {
    return report_failure(failure_line(e), u3d::kExitRuntime);
  }
}
