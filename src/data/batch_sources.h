// Private to src/data: the two BatchSource implementations (batch_source.h) that BatchLoader
// (loader.h) chooses between and owns. Both finalize with the loader's BatchFinalizer.
#pragma once
#include <memory>

#include "u3d/data/batch_source.h"
#include "u3d/data/finalize.h"
#include "u3d/data/sampler.h"

namespace u3d {
struct LoaderOptions;  // loader.h; declared only, as loader.cpp includes this header
}  // namespace u3d

namespace u3d::loader_detail {

// Host sampling: sampler threads, staging ring, copies to the GPU on a side stream (host_source.cpp).
std::unique_ptr<BatchSource> host_source(const PatchSampler& sampler, const BatchFinalizer& finish,
                                         const LoaderOptions& options);
// GPU sampling over a data.cache: gpu cache (DeviceSampler; device_source.cpp).
std::unique_ptr<BatchSource> device_source(const PatchSampler& sampler, const BatchFinalizer& finish,
                                           const LoaderOptions& options);

}  // namespace u3d::loader_detail
