#include "u3d/commands.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdio>

#include "u3d/config.h"
#include "u3d/errors.h"
#include "u3d/logging.h"
#include "u3d/predictor.h"
#include "u3d/synth.h"
#include "u3d/trainer.h"

namespace u3d {
namespace {

Shape3 parse_size(const std::string& text) {
  std::vector<int64_t> v;
  size_t pos = 0;
  while (pos <= text.size()) {
    const size_t comma = text.find_first_of(",x", pos);
    const std::string part = text.substr(pos, comma == std::string::npos ? std::string::npos : comma - pos);
    char* end = nullptr;
    const long long n = std::strtoll(part.c_str(), &end, 10);
    if (part.empty() || *end != '\0' || n <= 0) {
      throw UsageError(fmt::format("synth: --size '{}': expected S or D,H,W (positive integers)", text));
    }
    v.push_back(n);
    if (comma == std::string::npos) break;
    pos = comma + 1;
  }
  if (v.size() == 1) return {v[0], v[0], v[0]};
  if (v.size() == 3) return {v[0], v[1], v[2]};
  throw UsageError(fmt::format("synth: --size '{}': expected S or D,H,W", text));
}

}  // namespace

int run_command(const RunCommand& cmd) {
  if (cmd.config.empty()) throw UsageError("--config is required (trainer --config exp.yaml); see --help");
  if (cmd.predict_only && cmd.resume) throw UsageError("--predict-only and --resume cannot be combined");
  Config cfg = load_config(cmd.config, cmd.overrides);
  init_console_logging(cfg.logging.level);
  if (cmd.predict_only) {
    run_prediction(cfg, cmd.checkpoint);
    return kExitOk;
  }
  Trainer trainer(std::move(cfg), TrainOptions{cmd.resume});
  trainer.fit();
  return kExitOk;
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
  o.seed = cmd.seed;
  o.val_fraction = cmd.val_fraction;
  o.test_fraction = cmd.test_fraction;
  std::error_code ec;
  if (std::filesystem::exists(cmd.out, ec) && !cmd.force) {
    throw UsageError(fmt::format("synth: {} exists; pass --force to replace it", cmd.out));
  }
  const auto t0 = std::chrono::steady_clock::now();
  if (cmd.format == "nnunet") {
    write_phantom_nnunet_raw(o, cmd.out);
  } else if (cmd.format == "h5") {
    write_phantom_dataset(o, cmd.out);
  } else {
    throw UsageError(fmt::format("synth: --format '{}': expected h5 or nnunet", cmd.format));
  }
  spdlog::info("synth: wrote {} ({} {} cases of {}x{}x{}, seed {}) in {:.1f} s", cmd.out, o.cases, cmd.task,
               o.size[0], o.size[1], o.size[2], o.seed,
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return kExitOk;
}

int config_reference_command() {
  std::fputs(reference_markdown().c_str(), stdout);
  return kExitOk;
}

}  // namespace u3d
