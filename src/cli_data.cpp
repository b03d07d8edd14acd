// The commands that make and plan datasets: synth, check-data, plan, cascade (their options; the
// commands themselves are in the library, u3d/app/commands.h).
#include "cli_commands.h"
#include "cli_options.h"
#include "u3d/app/commands.h"

namespace u3d_cli {

void add_synth_command(CLI::App& app, Commands& commands) {
  auto [a, c] =
      commands.add<u3d::SynthCommand>(app, "synth", "Make a phantom dataset (HDF5, format v1)", u3d::synth_command);
  a->add_option("--task", c.task, "dose | segmentation | surface | kits (KiTS19-like CT, 1.6 mm, varied sizes)")
      ->capture_default_str();
  a->add_option("--cases", c.cases, "Number of cases")
      ->check(number_in(0, kMaxCount, Whole::kYes))
      ->capture_default_str();
  a->add_option("--size", c.size, "Volume size: S or D,H,W voxels")->capture_default_str();
  a->add_option("--out", c.out, "Output file")->required();
  add_seed(a, c.seed, "Seed");
  add_val_fraction(a, c.val_fraction, "Share of cases in 'val'");
  add_test_fraction(a, c.test_fraction, "Share of cases in 'test'");
  add_force(a, c.force);
  a->add_option("--format", c.format,
                "h5 (dataset file) | nnunet (segmentation: nnU-Net raw folder of NIfTI files) | tiff "
                "(segmentation: folders images/ and labels/ of 3D TIFF volumes) | png (segmentation: one folder "
                "of 2D slices <case>_<z>.png with <case>_<z>_mask.png, trainer import images' layout)")
      ->capture_default_str();
}

void add_check_data_command(CLI::App& app, Commands& commands) {
  auto [a, c] = commands.add<u3d::CheckDataCommand>(
      app, "check-data", "Read every case of a dataset in full and report every problem", u3d::check_data_command);
  a->add_option("file", c.file, "Dataset file (HDF5, format v1)")->required();
  a->add_option("--split", c.split, "Check only this split's cases");
  add_threads(a, c.threads, "Reader threads; 0: cores - 1");
}

void add_plan_command(CLI::App& app, Commands& commands) {
  auto [a, c] = commands.add<u3d::PlanCommand>(
      app, "plan",
      "Plan an experiment for a dataset: fingerprint, spacing, network, patch and batch for the GPU memory",
      u3d::plan_command);
  a->add_option("data", c.data, "Dataset file (HDF5, format v1)")->required();
  a->add_option("--gpu-memory", c.gpu_memory_gib,
                "GPU memory budget in GiB (memory model); default 80 (--memory-model nnunet: 8)")
      ->check(number_in(0, kMaxGpuMemoryGib, Whole::kNo, /*lo_open=*/true));
  a->add_option("--device", c.device, "cpu (memory model) or cuda (measure candidates on the GPU)")
      ->capture_default_str();
  a->add_option("--memory-model", c.memory_model,
                "bytes (the step's bytes within 85% of the budget) or nnunet (nnU-Net's own model and batch rule: "
                "its plan)")
      ->check(one_of({"bytes", "nnunet"}))
      ->capture_default_str();
  a->add_flag("--renormalize", c.renormalize,
              "Normalisation from the fingerprint instead of what the importer recorded");
  a->add_option("--task", c.task, "auto | segmentation | dose")
      ->check(one_of({"auto", "segmentation", "dose"}))
      ->capture_default_str();
  a->add_option("--out", c.out,
                "YAML config to write (3d_fullres); default <data stem>_plan.yaml; beside it <out stem>_2d.yaml "
                "(2d) and, for large volumes, <out stem>_lowres.yaml");
  a->add_option("--name", c.name, "experiment.name; default the data file's stem");
  add_threads(a, c.threads, "Fingerprint threads; 0: every core");
  a->add_option("--split", c.splits, "Fingerprint only these splits' cases (comma-separated); default every case")
      ->delimiter(',');
  add_force(a, c.force, "Replace existing outputs");
}

void add_cascade_command(CLI::App& app, Commands& commands) {
  auto [a, c] = commands.add<u3d::CascadeCommand>(
      app, "cascade",
      "Add the first stage's (3d_lowres) segmentations to a dataset as input channels (nnU-Net's cascade)",
      u3d::cascade_command);
  a->add_option("--previous", c.previous, "The first stage's experiment folder (runs/NAME_lowres)")->required();
  a->add_option("--data", c.data, "The full-resolution dataset (.h5)")->required();
  a->add_option("--out", c.out, "The second stage's dataset (.h5)")->required();
  add_threads(a, c.threads, "Threads; 0: every core");
  add_force(a, c.force);
}

}  // namespace u3d_cli
