// The commands around a run: export (a checkpoint for PyTorch), plot (progress.png), bench-norm (norm
// layers timed three ways, app/norm_benchmark.h), config-reference.
#include "cli_commands.h"
#include "cli_options.h"
#include "u3d/app/commands.h"
#include "u3d/app/norm_benchmark.h"

namespace u3d_cli {

void add_export_command(CLI::App& app, Commands& commands) {
  auto [a, c] = commands.add<u3d::ExportCommand>(
      app, "export", "Write a run's checkpoint as model.safetensors, model.pt, model.ts (and model.onnx) for PyTorch",
      u3d::export_command);
  a->add_option("run_dir", c.run_dir, "Run folder (<output_dir>/<name>)")->required();
  a->add_option("--checkpoint", c.checkpoint, "best, last or a checkpoint path")->capture_default_str();
  a->add_option("--format", c.formats,
                "Comma-separated: safetensors, pt, torchscript, onnx (onnx runs scripts/python/export_onnx.py "
                "with U3D_PYTHON or python3)")
      ->delimiter(',')
      ->capture_default_str();
  a->add_option("--out", c.out, "Output folder (default <run>/export)");
}

void add_plot_command(CLI::App& app, Commands& commands) {
  auto [a, c] = commands.add<u3d::PlotCommand>(app, "plot", "Draw <run>/progress.png and .svg from metrics.csv",
                                               u3d::plot_command);
  a->add_option("run_dir", c.run_dir, "Run folder")->required();
  a->add_option("--out", c.out, "PNG file (default <run>/progress.png; the .svg beside it)");
}

void add_bench_norm_command(CLI::App& app, Commands& commands) {
  auto [a, c] = commands.add<u3d::NormBenchCommand>(
      app, "bench-norm",
      "Time a network's norm + activation layers three ways: ATen, the project's fused kernels and cuDNN's graphs",
      u3d::norm_benchmark_command);
  a->add_option("sites", c.sites, "SITES.json (scripts/bench/norm_bench.py writes it from a network)")->required();
  a->add_option("--steps", c.steps, "Timed runs per layer and way")
      ->check(CLI::Range(1, 1000000))
      ->capture_default_str();
  a->add_option("--warmup", c.warmup, "Untimed runs before them")->check(CLI::Range(0, 1000000))->capture_default_str();
  a->add_option("--device", c.device, "Where to time: auto (CUDA when there is a GPU), cuda or cpu")
      ->check(CLI::IsMember({"auto", "cuda", "cpu"}))
      ->capture_default_str();
}

void add_config_reference_command(CLI::App& app, Commands& commands) {
  auto* a = app.add_subcommand("config-reference", "Print every config key as Markdown");
  commands.add(a, [] { return u3d::config_reference_command(); });
}

}  // namespace u3d_cli
