#include "u3d/app/benchmark.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/run.h"
#include "u3d/core/text.h"
#include "u3d/data/cache.h"
#include "u3d/data/loader.h"
#include "u3d/data/sampler.h"
#include "u3d/data/truth_maps.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/train/resolve.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

using Clock = std::chrono::steady_clock;

int64_t batch_bytes(const Batch& b) {
  int64_t total = 0;
  for (const auto* t : {&b.image, &b.target, &b.mask, &b.maps.skeleton, &b.maps.distance}) {
    if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return total;
}

// Calls next(k) for k = 0, 1, ... : 2 warm-up calls, then for at least `seconds` and 5 batches.
template <class F>
DataBenchmarkRow measure(F&& next, double seconds, int64_t batch_size, bool cuda) {
  int64_t k = 0;
  for (; k < 2; ++k) next(k);
  if (cuda) torch::cuda::synchronize();
  DataBenchmarkRow row;
  int64_t bytes = 0;
  const auto t0 = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds || row.batches < 5) {
    bytes += next(k++);
    ++row.batches;
    if (cuda && elapsed + 0.05 >= seconds) torch::cuda::synchronize();
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  if (cuda) {
    torch::cuda::synchronize();
    elapsed = std::chrono::duration<double>(Clock::now() - t0).count();
  }
  row.seconds = elapsed;
  row.batches_per_second = static_cast<double>(row.batches) / elapsed;
  row.samples_per_second = row.batches_per_second * static_cast<double>(batch_size);
  row.megabytes_per_second = static_cast<double>(bytes) / elapsed / 1e6;
  return row;
}

std::string augment_summary(const AugmentConfig& a) {
  std::vector<std::string> on;
  if (a.flip_prob > 0) on.push_back("flips");
  if (a.rot90_prob > 0) on.push_back("rot90");
  if (a.affine_prob > 0) on.push_back("affine");
  if (a.elastic_prob > 0) on.push_back("elastic");
  if (a.intensity_prob > 0) on.push_back("intensity");
  if (a.gamma_prob > 0) on.push_back("gamma");
  if (a.noise_prob > 0) on.push_back("noise");
  return on.empty() ? "none" : fmt::format("{}", fmt::join(on, "+"));
}

}  // namespace

std::vector<int64_t> parse_worker_list(const std::string& text) {
  const auto out = parse_int_list(text);
  if (!out || std::any_of(out->begin(), out->end(), [](int64_t n) { return n < 1 || n > 1024; })) {
    throw UsageError(fmt::format("--workers '{}': expected thread counts such as 1,2,4", text));
  }
  return *out;
}

std::vector<DataBenchmarkRow> run_data_benchmark(const Config& cfg, const DataBenchmarkOptions& options) {
  const Runtime rt = init_runtime(cfg);
  // The run's own resolution (resolve.h): the same checks, splits, preprocessing and steps.
  const auto dataset = open_dataset(cfg);
  const DatasetReader& reader = *dataset;
  const ResolvedConfig rc = resolve(cfg, reader, rt.device);
  const auto& ids = rc.train_ids;
  const Preprocessor& pre = *rc.pre;
  std::vector<int64_t> workers = options.workers;
  if (workers.empty()) {
    for (int64_t w = 1; w < data_workers(cfg); w *= 2) workers.push_back(w);
    workers.push_back(data_workers(cfg));
  }
  const bool cuda = rt.device.is_cuda();
  std::vector<CachePlacement> placements = {CachePlacement::kMemory};
  if (cuda) {
    placements.push_back(CachePlacement::kPinned);
    placements.push_back(CachePlacement::kGpu);
  } else {
    spdlog::info("benchmark: no CUDA device: the pinned and gpu placements are not measured");
  }
  SamplerOptions so = sampler_options(rc.cfg, pre.channel_names());
  so.channels_last_images = resolve_channels_last(rc.cfg.model, rt.device);  // as training finishes them
  const int64_t steps = rc.steps_per_epoch;
  auto position = [&](int64_t k) { return std::make_pair(1 + k / steps, k % steps); };

  std::vector<DataBenchmarkRow> rows;
  for (const CachePlacement placement : placements) {
    CacheOptions co;
    co.placement = placement;
    co.device = rt.device;
    co.float16 = cfg.data.cache_float16;
    co.threads = loading_threads(cfg);
    co.label_maps = truth_map_maker(truth_map_options(cfg, rc.info));  // cropped as a training run does
    const StackedCache cache = StackedCache::load(reader, ids, pre, co);
    spdlog::info("benchmark: cache {}", cache.describe());
    const PatchSampler sampler(cache, so);
    auto add = [&](DataBenchmarkRow row, const std::string& stage, int64_t w) {
      row.placement = to_string(placement);
      row.stage = stage;
      row.workers = w;
      spdlog::info("benchmark: {} {} {} threads: {:.1f} batches/s", row.placement, stage, w, row.batches_per_second);
      rows.push_back(row);
    };
    if (placement == CachePlacement::kGpu) {
      BatchLoader loader(sampler, LoaderOptions{rt.device, 1, cfg.data.prefetch, steps, -1, true});
      add(measure(
              [&](int64_t k) {
                const auto [e, s] = position(k);
                return batch_bytes(loader.next(e, s));
              },
              options.seconds, cfg.data.batch_size, cuda),
          "device", 0);
      continue;
    }
    for (const int64_t w : workers) {
      BatchLoader loader(sampler, LoaderOptions{rt.device, w, cfg.data.prefetch, steps, -1, /*finalize=*/false});
      add(measure(
              [&](int64_t k) {
                const auto [e, s] = position(k);
                return loader.next_raw(e, s).bytes();
              },
              options.seconds, cfg.data.batch_size, false),
          "host", w);
    }
    for (const int64_t w : workers) {
      BatchLoader loader(sampler, LoaderOptions{rt.device, w, cfg.data.prefetch, steps, -1, /*finalize=*/true});
      add(measure(
              [&](int64_t k) {
                const auto [e, s] = position(k);
                return batch_bytes(loader.next(e, s));
              },
              options.seconds, cfg.data.batch_size, cuda),
          "device", w);
    }
  }
  return rows;
}

int data_benchmark_command(const Config& cfg, const DataBenchmarkOptions& options) {
  const auto rows = run_data_benchmark(cfg, options);
  const Runtime rt = init_runtime(cfg);
  const auto& p = cfg.data.patch_size;
  std::string table = fmt::format(
      "data benchmark: {}, batch {}, patch {}x{}x{}, augment {}, device {}\n"
      "{:<10} {:<7} {:>7} {:>10} {:>10} {:>10}\n",
      cfg.data.path, cfg.data.batch_size, p[0], p[1], p[2], augment_summary(cfg.augment), rt.device.str(), "placement",
      "stage", "threads", "batches/s", "samples/s", "MB/s");
  Json results = Json::array();
  for (const auto& r : rows) {
    table += fmt::format("{:<10} {:<7} {:>7} {:>10.2f} {:>10.2f} {:>10.1f}\n", r.placement, r.stage, r.workers,
                         r.batches_per_second, r.samples_per_second, r.megabytes_per_second);
    results.push_back({{"placement", r.placement},
                       {"stage", r.stage},
                       {"workers", r.workers},
                       {"batches", r.batches},
                       {"seconds", json_number(r.seconds, 3)},
                       {"batches_per_s", json_number(r.batches_per_second, 3)},
                       {"samples_per_s", json_number(r.samples_per_second, 3)},
                       {"mb_per_s", json_number(r.megabytes_per_second, 1)}});
  }
  const bool cuda = rt.device.is_cuda();
  if (!cuda) table += "pinned, gpu: not measured (no CUDA device)\n";
  std::fputs(table.c_str(), stdout);
  const Json json = {
      {"benchmark", "data"},         {"dataset", cfg.data.path},
      {"device", rt.device.str()},   {"batch_size", cfg.data.batch_size},
      {"patch", {p[0], p[1], p[2]}}, {"augment", augment_summary(cfg.augment)},
      {"results", results},          {"not_measured", cuda ? Json::array() : Json::array({"pinned", "gpu"})}};
  std::fputs((json_line(json) + "\n").c_str(), stdout);
  std::fflush(stdout);
  return kExitOk;
}

}  // namespace u3d
