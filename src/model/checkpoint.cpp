#include "u3d/model/checkpoint.h"
#include "u3d/model/checkpoint_manifest.h"

#include <c10/cuda/CUDAFunctions.h>
#include <spdlog/spdlog.h>

#include <chrono>
#include <cstdlib>
#include <ctime>
#include <mutex>
#include <type_traits>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/version.h"

namespace u3d {
namespace {

constexpr int64_t kCheckpointFormat = 2;

std::string utc_now() {
  const std::time_t t = std::chrono::system_clock::to_time_t(std::chrono::system_clock::now());
  std::tm tm{};
  gmtime_r(&t, &tm);
  char buf[32];
  std::strftime(buf, sizeof(buf), "%Y-%m-%dT%H:%M:%SZ", &tm);
  return buf;
}

// ---------------------------------------------------------------------------------------------
// Archive fields. Integers and doubles go in as IValues; names are part of the format.
// Every field of a checkpoint but its format number, written and read from this one list. A field
// added after the first layout is `optional`: a checkpoint written before it lacks it, and reading
// keeps the default of CheckpointInfo/TrainState.
template <class Io, class Info>
void visit_fields(Io& io, Info& info) {
  constexpr bool kOptional = true;
  io("u3d.version", info.version);
  io("u3d.commit", info.commit);
  io("u3d.created", info.created);
  io("u3d.config", info.config_yaml);
  io("u3d.task", info.task);
  io("u3d.in_channels", info.in_channels);
  io("u3d.out_channels", info.out_channels);
  auto& s = info.state;
  io("state.epoch", s.epoch);
  io("state.global_step", s.global_step);
  io("state.step_in_epoch", s.step_in_epoch);
  io("state.best_metric", s.best_metric);
  io("state.best_epoch", s.best_epoch);
  io("state.train_target_mean", s.train_target_mean);
  io("state.epoch_loss_sum", s.epoch_loss_sum);
  io("state.epoch_loss_steps", s.epoch_loss_steps);
  io("state.epoch_samples", s.epoch_samples);
  io("state.epoch_skipped", s.epoch_skipped);
  io("state.skipped_total", s.skipped_total);
  io("state.skipped_in_a_row", s.skipped_in_a_row);
  io("state.loss_scale", s.loss_scale);
  io("state.loss_scale_growth", s.loss_scale_growth);
  auto& p = info.sampler;
  io("sampler.seed", p.seed);
  io("sampler.batch_size", p.batch_size);
  io("sampler.epoch", p.epoch);
  io("sampler.next_sample", p.next_sample);
  io("sampler.cases", p.cases);
  io("sampler.cases_sha256", p.cases_sha256);
  io("sampler.world_size", p.world_size, kOptional);
  io("state.pseudo_dice_ema", s.pseudo_dice_ema, kOptional);
  io("state.epoch_seconds", s.epoch_seconds, kOptional);
  io("state.epoch_data_seconds", s.epoch_data_seconds, kOptional);
  io("state.run_seconds", s.run_seconds, kOptional);
  io("state.epoch_term_sums", s.epoch_term_sums, kOptional);
}

void write_info(torch::serialize::OutputArchive& ar, const CheckpointInfo& info) {
  ar.write("u3d.format", c10::IValue(kCheckpointFormat));
  auto put = [&](const char* key, const auto& value, bool /*optional*/ = false) {
    using T = std::decay_t<decltype(value)>;
    if constexpr (std::is_same_v<T, std::vector<double>>) {
      ar.write(key, c10::IValue(c10::List<double>(value)));
    } else {
      ar.write(key, c10::IValue(value));
    }
  };
  visit_fields(put, info);
}

CheckpointInfo read_info(torch::serialize::InputArchive& ar, const std::filesystem::path& path) {
  c10::IValue format;
  if (!ar.try_read("u3d.format", format)) {
    throw CheckpointError(fmt::format("{}: not a trainer checkpoint ('u3d.format' missing)", path.string()));
  }
  if (!format.isInt()) {
    throw CheckpointError(
        fmt::format("{}: not a trainer checkpoint ('u3d.format' holds a {})", path.string(), format.tagKind()));
  }
  if (format.toInt() != kCheckpointFormat) {
    throw CheckpointError(fmt::format("{}: checkpoint format {} is not supported (this build reads {})", path.string(),
                                      format.toInt(), kCheckpointFormat));
  }
  CheckpointInfo info;
  auto get = [&](const char* key, auto& value, bool optional = false) {
    c10::IValue v;
    if (!ar.try_read(key, v)) {
      if (optional) return;
      throw CheckpointError(fmt::format("{}: not a trainer checkpoint ('{}' missing)", path.string(), key));
    }
    using T = std::decay_t<decltype(value)>;
    const bool fits = std::is_same_v<T, std::string>           ? v.isString()
                      : std::is_same_v<T, double>              ? v.isDouble()
                      : std::is_same_v<T, std::vector<double>> ? v.isDoubleList()
                                                               : v.isInt();
    if (!fits) {
      throw CheckpointError(
          fmt::format("{}: not a trainer checkpoint ('{}' holds a {})", path.string(), key, v.tagKind()));
    }
    if constexpr (std::is_same_v<T, std::string>) {
      value = v.toStringRef();
    } else if constexpr (std::is_same_v<T, double>) {
      value = v.toDouble();
    } else if constexpr (std::is_same_v<T, std::vector<double>>) {
      value = v.toDoubleVector();
    } else {
      value = v.toInt();
    }
  };
  visit_fields(get, info);
  return info;
}

torch::serialize::InputArchive open_archive(const std::filesystem::path& path, const torch::Device& device) {
  std::error_code ec;
  if (!std::filesystem::exists(path, ec)) {
    throw CheckpointError(fmt::format("{}: checkpoint not found", path.string()), kExitUsage);
  }
  if (std::filesystem::is_directory(path, ec)) {
    throw CheckpointError(fmt::format("{}: is a folder, expected a checkpoint file", path.string()), kExitUsage);
  }
  torch::serialize::InputArchive ar;
  try {
    ar.load_from(path.string(), device);
  } catch (const std::exception&) {
    // LibTorch's zip reader (miniz) says why in a paragraph of its own; the user needs the file,
    // that its bytes are damaged, and what to do.
    throw CheckpointError(
        fmt::format("{}: cannot read checkpoint: the file is truncated or corrupt ({} bytes, not a complete "
                    "checkpoint archive); use another checkpoint of the run",
                    path.string(), std::filesystem::file_size(path, ec)));
  }
  return ar;
}

}  // namespace

// -----------------------------------------------------------------------------------------------
void save_checkpoint(const std::filesystem::path& path, const CheckpointInfo& info_in, NetworkImpl& model,
                     const CheckpointedState* optimizer) {
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
    ar.write("rng.cuda",
             at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, c10::cuda::current_device())).get_state(),
             true);
  }
  const auto dir = path.parent_path().empty() ? std::filesystem::path(".") : path.parent_path();
  commit_checkpoint_file(dir, path, [&](const ByteSink& sink) {
    // No exception may cross LibTorch's zip writer (its destructor would std::terminate): the first
    // write error is kept, the rest of the archive is discarded, and the error is raised after.
    std::exception_ptr failure;
    ar.save_to([&](const void* data, size_t size) -> size_t {
      if (!failure) {
        try {
          sink(data, size);
        } catch (...) {
          failure = std::current_exception();
        }
      }
      return size;
    });
    if (failure) std::rethrow_exception(failure);
  });
}

CheckpointInfo read_checkpoint_info(const std::filesystem::path& path) {
  auto ar = open_archive(path, torch::kCPU);
  return read_info(ar, path);
}

CheckpointInfo load_checkpoint(const std::filesystem::path& path, NetworkImpl& model, CheckpointedState* optimizer,
                               const torch::Device& device, bool restore_rng) {
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
      try {
        optimizer->load(opt_ar);
      } catch (const CheckpointError& e) {
        throw CheckpointError(fmt::format("{}: {}", path.string(), e.what()));
      }
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
        at::Generator gen =
            at::globalContext().defaultGenerator(torch::Device(torch::kCUDA, c10::cuda::current_device()));
        std::lock_guard<std::mutex> lock(gen.mutex());
        gen.set_state(cuda_state.to(torch::kCPU));
      }
    }
  } catch (const c10::Error& e) {
    throw CheckpointError(fmt::format("{}: does not fit this model: {}", path.string(), error_line(e)));
  }
  return info;
}

}  // namespace u3d
