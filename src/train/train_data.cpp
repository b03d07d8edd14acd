#include "u3d/train/train_data.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/data/preflight.h"
#include "u3d/data/truth_maps.h"
#include "u3d/train/train_step.h"

namespace u3d {
namespace {

// Logs the checks' report; DataError listing the cases when it holds an error.
void refuse_errors(const DataReport& report, const std::string& path) {
  log_report(report, "preflight");
  if (report.errors() == 0) return;
  throw DataError(
      fmt::format("{}: the preflight found {} error(s) in {} of the {} train/val cases (listed above); "
                  "fix them or leave those cases out of the splits (`trainer check-data {}` lists "
                  "every problem)",
                  path, report.errors(), report.bad_cases().size(), report.cases_checked, path));
}

}  // namespace

TrainData::TrainData(const ResolvedConfig& rc, const DatasetReader& reader, const Runtime& runtime) : pre_(rc.pre) {
  const Config& cfg = rc.cfg;
  const auto t0 = std::chrono::steady_clock::now();
  // data.preflight: each case checked as it is read (CheckedReader), so it is read only once.
  std::unique_ptr<CheckedReader> checked;
  CaseSource read;
  if (cfg.data.preflight) {
    checked = std::make_unique<CheckedReader>(reader);
    checked->check_inputs(*pre_, cfg.data.normalize);  // resolved: resolve() wrote the `dataset` entries
    read = [&checked](const std::string& id) { return checked->read(id); };
  }
  try {
    load(rc, reader, runtime, read);
  } catch (const DataError&) {
    if (!checked) throw;
    std::vector<std::string> ids = rc.train_ids;  // a case failed, or the cache does not fit: list every problem
    ids.insert(ids.end(), rc.val_ids.begin(), rc.val_ids.end());
    checked->check_rest(ids, runtime.threads);
    refuse_errors(checked->report(), cfg.data.path);
    throw;  // no case has an error: the failure was another one
  }
  if (checked) refuse_errors(checked->report(), cfg.data.path);
  spdlog::info("data: {} ({}), {} train / {} val cases, {} input channels [{}], cache {} in {:.1f} s", cfg.data.path,
               to_string(rc.task()), train_cache_->size(), val_cache_ ? val_cache_->size() : 0, pre_->in_channels(),
               fmt::join(pre_->channel_names(), ", "),
               human_bytes(static_cast<double>(train_cache_->bytes() + (val_cache_ ? val_cache_->bytes() : 0))),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  spdlog::info("data: training cache {}; batches: {}", train_cache_->describe(), loader_->describe());
}

void TrainData::load(const ResolvedConfig& rc, const DatasetReader& reader, const Runtime& runtime,
                     const CaseSource& read) {
  const Config& cfg = rc.cfg;
  CacheOptions cache_options;
  cache_options.read = read;
  cache_options.placement = cfg.data.cache;
  cache_options.device = runtime.device;
  cache_options.float16 = cfg.data.cache_float16;
  cache_options.threads = loading_threads(cfg);  // one per core: nothing else runs yet
  cache_options.gpu_share = cfg.data.gpu_cache_share;
  cache_options.label_maps = truth_map_maker(truth_map_options(cfg, rc.info));
  cache_options.pad_to = sampler_options(cfg, pre_->channel_names()).patch;  // nnU-Net pads small cases
  train_cache_ = std::make_unique<StackedCache>(StackedCache::load(reader, rc.train_ids, *pre_, cache_options));
  if (!train_cache_->has_targets()) {
    throw DataError(fmt::format("{}: split '{}' has cases without a target; training needs targets", cfg.data.path,
                                cfg.data.train_split));
  }
  if (rc.validates()) {
    val_cache_ = std::make_unique<TensorCache>(TensorCache::load(reader, rc.val_ids, *pre_, runtime.threads, read));
    if (!val_cache_->has_targets()) {
      throw DataError(fmt::format("{}: split '{}' has cases without a target; validation needs targets", cfg.data.path,
                                  cfg.data.val_split));
    }
  }
  SamplerOptions so = sampler_options(cfg, pre_->channel_names());
  so.channels_last_images = resolve_channels_last(cfg.model, runtime.device);  // the step's layout
  so.shard = rc.rank;
  so.shards = rc.world_size;
  sampler_ = std::make_unique<PatchSampler>(*train_cache_, so);
  if (rc.validates_patches()) {
    SamplerOptions vo = so;
    vo.shard = 0;  // the validator splits the val batches among the ranks itself
    vo.shards = 1;
    vo.seed = so.seed ^ 0x7A1D0000ull;  // its own stream, independent of the training patches
    vo.apply_augmentation = false;
    // Views, not a copy; the maps, as the training cache's, for the val loss.
    val_stack_ = std::make_unique<StackedCache>(val_cache_->stack_shared(
        cache_options.label_maps, runtime.device.is_cuda() ? CachePlacement::kPinned : CachePlacement::kMemory,
        cache_options.pad_to));
    val_sampler_ = std::make_unique<PatchSampler>(*val_stack_, vo);
  }
  // Validation on CUDA copies the val cases to the GPU every epoch: from page-locked memory, so the
  // copies are asynchronous (what stack_shared already placed there stays).
  if (val_cache_ && runtime.device.is_cuda()) val_cache_->pin_memory();
  LoaderOptions lo;
  lo.device = runtime.device;
  lo.workers = data_workers(cfg);
  lo.prefetch = cfg.data.prefetch;
  lo.steps_per_epoch = rc.steps_per_epoch * cfg.training.accumulate_steps;  // the loader counts micro-batches
  lo.epochs = cfg.training.epochs;
  if (lo.prefetch > 0 && lo.prefetch < lo.workers) {
    spdlog::warn("data.prefetch: {} is below data.workers = {}; only {} sampler threads can work at once", lo.prefetch,
                 lo.workers, lo.prefetch);
  }
  loader_ = std::make_unique<BatchLoader>(*sampler_, lo);
}

TrainData::~TrainData() = default;

}  // namespace u3d
