// `trainer export RUN_DIR`: a run's checkpoint as model files other programs load
// (model/model_export.h), and `trainer plot RUN_DIR`: progress.png from metrics.csv.
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstdlib>
#include <filesystem>
#include <set>

#include "u3d/app/commands.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/output_head.h"
#include "u3d/core/version.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_store.h"
#include "u3d/model/model_export.h"
#include "u3d/model/unet.h"
#include "u3d/monitor/progress_plot.h"

namespace fs = std::filesystem;

namespace u3d {
namespace {

// What the dataset of the run tells about the inputs and outputs; a warning and empty values when
// the file is no longer there.
struct DataFacts {
  std::vector<std::string> channels, labels;
  std::string spacing = "null";
};

DataFacts data_facts(const Config& trained) {
  DataFacts facts;
  try {
    const DatasetReader reader(trained.data.path);
    const auto& info = reader.info();
    facts.channels = trained.data.channels.empty() ? info.channel_names : trained.data.channels;
    facts.labels = info.class_names;
    const auto& train = reader.split(trained.data.train_split);
    if (!train.empty()) {
      const auto s = reader.case_spacing(train.front());  // the attribute alone, no voxels read
      facts.spacing = fmt::format("[{}, {}, {}]", s[0], s[1], s[2]);
    }
  } catch (const std::exception& e) {
    spdlog::warn("export: the run's dataset {} cannot be read ({}); channel names, labels and spacing are left out",
                 trained.data.path, error_line(e));
    facts.channels = trained.data.channels;
  }
  return facts;
}

std::string json_list(const std::vector<std::string>& items) { return json_line(Json(items)); }

ModelMeta model_meta(const Config& trained, const CheckpointInfo& info, const fs::path& checkpoint, NetworkImpl& net) {
  const DataFacts facts = data_facts(trained);
  // The model section as JSON, blocks_per_level resolved (nnU-Net's defaults when empty).
  YAML::Node model = YAML::Load(to_yaml(trained))["model"];
  std::vector<int64_t> blocks;
  for (int64_t l = 0; l < trained.model.levels; ++l) blocks.push_back(residual_blocks(trained.model, l));
  model["blocks_per_level"] = blocks;
  const auto& p = trained.data.patch_size;
  return {{"format", "u3d-model"},
          {"format_version", "1"},
          {"task", info.task},
          {"architecture", to_string(trained.model.architecture)},
          {"in_channels", std::to_string(info.in_channels)},
          {"out_channels", std::to_string(info.out_channels)},  // the classes K (segmentation)
          // what the network outputs: softmax, K logit channels; sigmoid, K - 1 (channel k - 1 = label k)
          {"head", to_string(trained.model.head)},
          {"network_channels", std::to_string(network_channels(trained.model.head, info.out_channels))},
          {"model", yaml_value_json(YAML::Dump(model))},
          {"config", info.config_yaml},
          {"channels", json_list(facts.channels)},
          {"labels", json_list(facts.labels)},
          {"normalize", json_list(trained.data.normalize)},
          {"target_scale", fmt::format("{}", trained.data.target_scale)},
          {"patch_size", json_line(Json::array({p[0], p[1], p[2]}))},
          {"spacing", facts.spacing},
          {"size_divisor", std::to_string(net.size_divisor())},
          {"version", info.version},
          {"commit", info.commit},
          {"checkpoint", checkpoint.filename().string()},
          {"epoch", std::to_string(info.state.epoch)}};
}

// The Python that writes model.onnx: U3D_PYTHON, else python3; the script from U3D_PYTHON_SCRIPTS,
// beside the program (bundle: libexec/trainer -> scripts/python/) or in the source tree it was
// built from (build/<preset>/trainer -> scripts/python/).
fs::path onnx_script() {
  std::error_code ec;
  const fs::path exe = fs::read_symlink("/proc/self/exe", ec);
  std::vector<fs::path> candidates;
  if (const char* dir = std::getenv("U3D_PYTHON_SCRIPTS")) candidates.push_back(fs::path(dir) / "export_onnx.py");
  if (!ec) {
    candidates.push_back(exe.parent_path().parent_path() / "scripts/python/export_onnx.py");
    candidates.push_back(exe.parent_path().parent_path().parent_path() / "scripts/python/export_onnx.py");
  }
  for (const auto& c : candidates) {
    if (fs::exists(c, ec)) return c;
  }
  throw IoError(
      "export onnx: scripts/python/export_onnx.py not found beside the program; set U3D_PYTHON_SCRIPTS to "
      "the folder that holds it");
}

// Runs `argv` (argv[0] looked up in PATH) and waits: its wait status, or -1 when it cannot start.
// No shell: a path may hold quotes, spaces or `$` without changing the command.
int run_program(const std::vector<std::string>& argv) {
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t pid = 0;
  if (::posix_spawnp(&pid, args[0], nullptr, nullptr, args.data(), environ) != 0) return -1;
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0) {
    if (errno != EINTR) return -1;
  }
  return status;
}

void write_onnx(const fs::path& model_pt, const fs::path& out) {
  const char* python = std::getenv("U3D_PYTHON");
  const std::vector<std::string> argv = {python ? python : "python3", onnx_script().string(), model_pt.string(),
                                         "--out", out.string()};
  const std::string command = fmt::format("{}", fmt::join(argv, " "));
  spdlog::info("export: {}", command);
  const int status = run_program(argv);
  if (status != 0) {
    std::error_code ec;
    fs::remove(out, ec);
    throw IoError(
        fmt::format("export onnx: {} failed ({}); it needs a Python with torch, onnx and onnxscript "
                    "(set U3D_PYTHON)",
                    command,
                    status < 0          ? "cannot start " + argv.front()
                    : WIFEXITED(status) ? fmt::format("exit {}", WEXITSTATUS(status))
                                        : fmt::format("signal {}", WTERMSIG(status))));
  }
}

// The checkpoint to export. "best" and "last" must verify against the manifest: an export is
// what others load, so a run folder without manifest.sha256 is refused with the way to restore it
// (CheckpointStore::resolve returns only verified ones where there is a manifest). A path the user
// names is exported with a warning when it cannot be verified, as --resume PATH loads it.
fs::path verified_checkpoint(const CheckpointStore& store, const std::string& which) {
  std::error_code ec;
  if ((which == "best" || which == "last") && !fs::exists(store.manifest_path(), ec)) {
    throw CheckpointError(
        fmt::format("{}: no {} in it, so --checkpoint {} cannot be verified; export writes only a checkpoint that "
                    "verifies: check that the checkpoints load (trainer --predict-only --checkpoint PATH), restore "
                    "the manifest (cd {} && sha256sum epoch_*.pt best.pt > {}) or name a file with --checkpoint "
                    "PATH to export it unverified",
                    store.dir().string(), CheckpointStore::kManifestName, which, store.dir().string(),
                    CheckpointStore::kManifestName),
        kExitUsage);
  }
  return store.resolve(which);  // with a manifest: verified (a mismatch of a named path is an error)
}

// What one export writes from: the checkpoint's tensors, facts and network, and the staging folder.
struct ExportInputs {
  const NamedTensors& tensors;
  const CheckpointInfo& info;
  const ModelMeta& meta;
  Network& net;
  fs::path staged;
};

// The export formats, one row each: the --format word, the file, the format whose file it is made
// from (written first), and its writer.
struct ExportFormat {
  const char* name;
  const char* file;
  const char* made_from;
  void (*write)(const ExportInputs& in, const fs::path& file);
};
const std::array<ExportFormat, 4> kFormats = {{
    {"safetensors", "model.safetensors", nullptr,
     [](const ExportInputs& in, const fs::path& file) {
       write_file_atomic(file, safetensors_bytes(in.tensors, in.meta));
     }},
    {"pt", "model.pt", nullptr,
     [](const ExportInputs& in, const fs::path& file) {
       write_file_atomic(file, state_dict_pt_bytes(in.tensors, in.info.config_yaml, in.meta));
     }},
    {"torchscript", "model.ts", nullptr,
     [](const ExportInputs& in, const fs::path& file) {
       const int64_t side = std::min<int64_t>(2 * in.net->size_divisor(), 64);
       write_file_atomic(file,
                         torchscript_bytes(*in.net, {1, in.info.in_channels, side, side, side}, json_object(in.meta)));
     }},
    // The ONNX script builds the network from model.pt.
    {"onnx", "model.onnx", "pt",
     [](const ExportInputs& in, const fs::path& file) { write_onnx(in.staged / "model.pt", file); }},
}};

std::string format_names() {
  std::vector<std::string> names;
  for (const auto& f : kFormats) names.emplace_back(f.name);
  return fmt::format("{}", fmt::join(names, ","));
}

}  // namespace

int export_command(const ExportCommand& cmd) {
  std::set<std::string> formats;  // those asked for and those they are made from
  for (const auto& f : cmd.formats) {
    const auto row = std::find_if(kFormats.begin(), kFormats.end(), [&](const ExportFormat& r) { return f == r.name; });
    if (row == kFormats.end()) throw UsageError(fmt::format("--format {}: expected a list of {}", f, format_names()));
    formats.insert(f);
    if (row->made_from != nullptr) formats.insert(row->made_from);
  }
  const fs::path run(cmd.run_dir);
  std::error_code ec;
  if (!fs::is_directory(run / "checkpoints", ec)) {
    throw UsageError(fmt::format("{}: not a run folder (no checkpoints/ in it)", run.string()));
  }
  const CheckpointStore store(run / "checkpoints", /*keep_last=*/2);
  const fs::path checkpoint = verified_checkpoint(store, cmd.checkpoint);
  const CheckpointInfo info = read_checkpoint_info(checkpoint);
  const Config trained = load_config_from_string(info.config_yaml, checkpoint.string() + " (config)");
  Network net = build_network(trained.model, info.in_channels, network_channels(trained.model.head, info.out_channels));
  load_checkpoint(checkpoint, *net, nullptr, torch::kCPU, /*restore_rng=*/false);
  net->eval();
  const ModelMeta meta = model_meta(trained, info, checkpoint, *net);
  const fs::path out = cmd.out.empty() ? run / "export" : fs::path(cmd.out);
  for (const auto& f : kFormats) refuse_output_over_input("export", "--out", out / f.file, {checkpoint});
  ensure_writable_directory(out);
  remove_stale_temporaries(out);

  // The whole set is made in a staging folder and moved in only when every format succeeded: a
  // failure on the way (the ONNX step, a full disk) leaves the previous export as it was.
  const fs::path staged = out / fmt::format(".export.tmp.{}", static_cast<long>(::getpid()));
  const NamedTensors tensors = export_tensors(*net);
  const ExportInputs inputs{tensors, info, meta, net, staged};
  try {
    ensure_writable_directory(staged);
    for (const bool derived : {false, true}) {  // the files others are made from first
      for (const auto& f : kFormats) {
        if (formats.count(f.name) > 0 && (f.made_from != nullptr) == derived) f.write(inputs, staged / f.file);
      }
    }
  } catch (...) {
    fs::remove_all(staged, ec);
    throw;
  }
  // One export per folder: files of formats not asked for now came from another checkpoint.
  for (const auto& f : kFormats) {
    const fs::path from = staged / f.file, to = out / f.file;
    if (fs::exists(from, ec)) {
      fs::rename(from, to, ec);
      if (ec) throw IoError(fmt::format("{}: cannot move the exported file into place: {}", to.string(), ec.message()));
    } else {
      fs::remove(to, ec);
    }
  }
  fsync_directory(out);
  fs::remove_all(staged, ec);
  for (const auto& f : kFormats) {
    if (fs::exists(out / f.file, ec)) spdlog::info("export: {}", (out / f.file).string());
  }
  spdlog::info("export: {} (epoch {}) of {}, {} tensors; load in Python with scripts/python/u3d_model.py",
               checkpoint.filename().string(), info.state.epoch, run.string(), tensors.size());
  return kExitOk;
}

int plot_command(const PlotCommand& cmd) {
  const fs::path run(cmd.run_dir);
  const fs::path metrics = run / "metrics.csv";
  fs::path png = cmd.out.empty() ? run / "progress.png" : fs::path(cmd.out);
  if (png.extension() != ".png") throw UsageError(fmt::format("--out {}: expected a .png file", png.string()));
  fs::path svg = png;
  svg.replace_extension(".svg");
  const MetricsTable table = read_metrics_csv(metrics);  // IoError naming the file
  write_progress_plot(table, PlotFiles{png, svg}, run.filename().string());
  spdlog::info("plot: {} and {} ({} epochs)", png.string(), svg.string(), table.rows());
  return kExitOk;
}

}  // namespace u3d
