#include "u3d/checkpoint.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <ctime>
#include <mutex>
#include <regex>

#include "u3d/errors.h"
#include "u3d/files.h"
#include "u3d/version.h"

namespace u3d {
namespace {

constexpr int64_t kCheckpointFormat = 1;

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

void write_info(torch::serialize::OutputArchive& ar, const CheckpointInfo& info) {
  ar.write("u3d.format", c10::IValue(kCheckpointFormat));
  ar.write("u3d.version", c10::IValue(info.version));
  ar.write("u3d.commit", c10::IValue(info.commit));
  ar.write("u3d.created", c10::IValue(info.created));
  ar.write("u3d.config", c10::IValue(info.config_yaml));
  ar.write("u3d.task", c10::IValue(info.task));
  ar.write("u3d.in_channels", c10::IValue(info.in_channels));
  ar.write("u3d.out_channels", c10::IValue(info.out_channels));
  ar.write("state.epoch", c10::IValue(info.state.epoch));
  ar.write("state.global_step", c10::IValue(info.state.global_step));
  ar.write("state.step_in_epoch", c10::IValue(info.state.step_in_epoch));
  ar.write("state.best_metric", c10::IValue(info.state.best_metric));
  ar.write("state.best_epoch", c10::IValue(info.state.best_epoch));
  ar.write("state.train_target_mean", c10::IValue(info.state.train_target_mean));
  ar.write("state.pseudo_dice_ema", c10::IValue(info.state.pseudo_dice_ema));
}

CheckpointInfo read_info(torch::serialize::InputArchive& ar, const std::filesystem::path& path) {
  auto get = [&](const char* key) {
    c10::IValue v;
    if (!ar.try_read(key, v)) throw CheckpointError(fmt::format("{}: not a trainer checkpoint ('{}' missing)", path.string(), key));
    return v;
  };
  CheckpointInfo info;
  const int64_t format = get("u3d.format").toInt();
  if (format != kCheckpointFormat) {
    throw CheckpointError(fmt::format("{}: checkpoint format {} is not supported (this build reads {})", path.string(),
                                      format, kCheckpointFormat));
  }
  info.version = get("u3d.version").toStringRef();
  info.commit = get("u3d.commit").toStringRef();
  info.created = get("u3d.created").toStringRef();
  info.config_yaml = get("u3d.config").toStringRef();
  info.task = get("u3d.task").toStringRef();
  info.in_channels = get("u3d.in_channels").toInt();
  info.out_channels = get("u3d.out_channels").toInt();
  info.state.epoch = get("state.epoch").toInt();
  info.state.global_step = get("state.global_step").toInt();
  info.state.step_in_epoch = get("state.step_in_epoch").toInt();
  info.state.best_metric = get("state.best_metric").toDouble();
  info.state.best_epoch = get("state.best_epoch").toInt();
  info.state.train_target_mean = get("state.train_target_mean").toDouble();
  c10::IValue ema;  // absent in checkpoints written before it existed
  if (ar.try_read("state.pseudo_dice_ema", ema)) info.state.pseudo_dice_ema = ema.toDouble();
  return info;
}

torch::serialize::InputArchive open_archive(const std::filesystem::path& path, const torch::Device& device) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw CheckpointError(fmt::format("{}: checkpoint not found", path.string()), kExitUsage);
  }
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path.string(), device);
  } catch (const c10::Error& e) {
    throw CheckpointError(fmt::format("{}: cannot read checkpoint (truncated or corrupt?): {}", path.string(),
                                      std::string(e.what_without_backtrace()).substr(0, 200)));
  }
  return ar;
}

}  // namespace

void save_checkpoint(const std::filesystem::path& path, const CheckpointInfo& info_in, NetworkImpl& model,
                     torch::optim::Optimizer* optimizer) {
  CheckpointInfo info = info_in;
  info.version = std::string(version());
  info.commit = std::string(git_commit());
  info.created = utc_now();
  torch::serialize::OutputArchive ar;
  write_info(ar, info);
  torch::serialize::OutputArchive model_ar;
  model.save(model_ar);
  ar.write("model", model_ar);
  if (optimizer) {
    torch::serialize::OutputArchive opt_ar;
    optimizer->save(opt_ar);
    ar.write("optimizer", opt_ar);
  }
  ar.write("rng.cpu", at::globalContext().defaultGenerator(torch::kCPU).get_state(), /*is_buffer=*/true);
  if (torch::cuda::is_available()) {
    ar.write("rng.cuda", at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, 0)).get_state(), true);
  }
  write_file_atomic(path, [&](const ByteSink& sink) {
    ar.save_to([&](const void* data, size_t size) {
      sink(data, size);
      return size;
    });
  });
}

CheckpointInfo read_checkpoint_info(const std::filesystem::path& path) {
  auto ar = open_archive(path, torch::kCPU);
  return read_info(ar, path);
}

CheckpointInfo load_checkpoint(const std::filesystem::path& path, NetworkImpl& model,
                               torch::optim::Optimizer* optimizer, const torch::Device& device, bool restore_rng) {
  auto ar = open_archive(path, device);
  CheckpointInfo info = read_info(ar, path);
  try {
    torch::serialize::InputArchive model_ar;
    ar.read("model", model_ar);
    model.load(model_ar);
    if (optimizer) {
      torch::serialize::InputArchive opt_ar;
      if (!ar.try_read("optimizer", opt_ar)) {
        throw CheckpointError(fmt::format("{}: holds no optimizer state", path.string()));
      }
      optimizer->load(opt_ar);
    }
    if (restore_rng) {
      torch::Tensor cpu_state;
      if (ar.try_read("rng.cpu", cpu_state, true)) {
        at::Generator gen = at::globalContext().defaultGenerator(torch::kCPU);  // a handle to the global one
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(cpu_state.to(torch::kCPU));
      }
      torch::Tensor cuda_state;
      if (torch::cuda::is_available() && ar.try_read("rng.cuda", cuda_state, true)) {
        at::Generator gen = at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, 0));
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(cuda_state.to(torch::kCPU));
      }
    }
  } catch (const c10::Error& e) {
    throw CheckpointError(fmt::format("{}: does not fit this model: {}", path.string(),
                                      std::string(e.what_without_backtrace()).substr(0, 300)));
  }
  return info;
}

CheckpointStore::CheckpointStore(std::filesystem::path dir, int64_t keep_last)
    : dir_(std::move(dir)), keep_last_(keep_last) {}

std::filesystem::path CheckpointStore::periodic_path(int64_t epoch) const {
  return dir_ / fmt::format("epoch_{:04d}.pt", epoch);
}

std::vector<std::filesystem::path> CheckpointStore::periodic() const {
  static const std::regex pattern(R"(epoch_(\d+)(?:_step_(\d+))?\.pt)");
  std::vector<std::pair<std::pair<int64_t, int64_t>, std::filesystem::path>> found;
  std::error_code ec;
  if (!std::filesystem::is_directory(dir_, ec)) return {};
  for (const auto& entry : std::filesystem::directory_iterator(dir_, ec)) {
    std::smatch m;
    const std::string name = entry.path().filename().string();
    if (entry.is_regular_file() && std::regex_match(name, m, pattern)) {
      const int64_t epoch = std::stoll(m[1].str());
      const int64_t step = m[2].matched ? std::stoll(m[2].str()) : INT64_MAX;  // epoch end sorts after its steps
      found.push_back({{epoch, step}, entry.path()});
    }
  }
  std::sort(found.begin(), found.end());
  std::vector<std::filesystem::path> out;
  for (auto& f : found) out.push_back(f.second);
  return out;
}

std::optional<std::filesystem::path> CheckpointStore::latest() const {
  const auto all = periodic();
  if (all.empty()) return std::nullopt;
  return all.back();
}

void CheckpointStore::prune() const {
  const auto all = periodic();
  const int64_t excess = static_cast<int64_t>(all.size()) - keep_last_;
  for (int64_t i = 0; i < excess; ++i) {
    std::error_code ec;
    std::filesystem::remove(all[static_cast<size_t>(i)], ec);
    if (ec) spdlog::warn("could not delete old checkpoint {}: {}", all[static_cast<size_t>(i)].string(), ec.message());
  }
}

std::filesystem::path CheckpointStore::resolve(const std::string& which) const {
  if (which == "last" || which.empty()) {
    if (auto p = latest()) return *p;
    throw CheckpointError(fmt::format("{}: no checkpoint found; train first (trainer --config ...)", dir_.string()),
                          kExitUsage);
  }
  if (which == "best") {
    std::error_code ec;
    if (std::filesystem::exists(best_path(), ec)) return best_path();
    if (auto p = latest()) {
      spdlog::warn("{} does not exist; using the newest checkpoint {}", best_path().string(), p->string());
      return *p;
    }
    throw CheckpointError(fmt::format("{}: no checkpoint found; train first (trainer --config ...)", dir_.string()),
                          kExitUsage);
  }
  std::error_code ec;
  if (!std::filesystem::exists(which, ec)) {
    throw CheckpointError(fmt::format("{}: checkpoint not found", which), kExitUsage);
  }
  return which;
}

}  // namespace u3d
