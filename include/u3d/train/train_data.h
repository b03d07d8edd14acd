// The training run's data, loaded once at start-up, before the run folder is touched: the training
// split as a StackedCache with its patch sampler and batch loader (loader.h: batches ready on the
// device, made ahead of the loop), and the validation split as a TensorCache with, for nnU-Net's
// pseudo-Dice, a patch sampler over the same cases (no augmentation, its own random stream) that
// crops from the same memory (TensorCache::stack_shared: the split is held once). Training on CUDA,
// the validation split is page-locked, so validation's copies to the GPU are asynchronous.
//
//   const TrainData data(rc, reader, runtime);   // resolve.h: rc checked before anything loads
//   Batch b = data.loader().next(epoch, step);
//
// Each case is read once, with one thread per core. With data.preflight it is checked as it is read
// (CheckedReader, preflight.h): a case with an error stops the load, the cases not read yet are
// checked too, and a DataError follows the list of every problem.
#pragma once
#include <memory>
#include <string>

#include "u3d/core/run.h"
#include "u3d/data/cache.h"
#include "u3d/data/loader.h"
#include "u3d/data/sampler.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/train/resolve.h"

namespace u3d {

class TrainData {
 public:
  TrainData(const ResolvedConfig& rc, const DatasetReader& reader, const Runtime& runtime);
  ~TrainData();
  TrainData(const TrainData&) = delete;
  TrainData& operator=(const TrainData&) = delete;

  const Preprocessor& pre() const { return *pre_; }
  const StackedCache& train_cache() const { return *train_cache_; }
  const PatchSampler& sampler() const { return *sampler_; }
  BatchLoader& loader() const { return *loader_; }
  const TensorCache* val_cache() const { return val_cache_.get(); }       // null without data.val_split
  const PatchSampler* val_sampler() const { return val_sampler_.get(); }  // null without val patches

 private:
  // The caches, samplers and loader; every case through `read`.
  void load(const ResolvedConfig& rc, const DatasetReader& reader, const Runtime& runtime, const CaseSource& read);

  std::shared_ptr<const Preprocessor> pre_;
  std::unique_ptr<StackedCache> train_cache_;
  std::unique_ptr<TensorCache> val_cache_;
  std::unique_ptr<StackedCache> val_stack_;  // val_cache_'s memory, stacked for val_sampler_
  std::unique_ptr<PatchSampler> sampler_;
  std::unique_ptr<PatchSampler> val_sampler_;
  std::unique_ptr<BatchLoader> loader_;  // after the samplers: destroyed (threads joined) first
};

}  // namespace u3d
