// Where a cache lives and how big it will be: data.cache's placement (auto resolved against free
// GPU memory), the memory available there, and the size estimate from the first case (cache.h).
#include <spdlog/spdlog.h>

#include "compact_case.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/data/cache.h"

#include <cuda_runtime_api.h>

namespace u3d {

namespace cache_detail {

std::string placement_text(CachePlacement p) {
  switch (p) {
    case CachePlacement::kGpu: return "GPU memory";
    case CachePlacement::kPinned: return "page-locked RAM";
    default: return "RAM";
  }
}

// The cache size of `ids` from the first case (already loaded: its compact dtypes) and every case's shape.
int64_t estimate_from(const CompactCase& first, const DatasetReader& reader, const std::vector<std::string>& ids,
                      bool float16) {
  int64_t per_voxel = 0;
  for (int kind : first.kinds) per_voxel += static_cast<int64_t>(c10::elementSize(compact_dtype(kind, float16)));
  if (first.target.defined()) {
    per_voxel += first.target.scalar_type() == torch::kUInt8 ? 1 : (float16 ? 2 : 4);
  }
  if (first.mask.defined()) per_voxel += 1;
  if (first.skeleton.defined()) per_voxel += 1;
  if (first.distance.defined()) per_voxel += first.distance.size(0) * 2;
  int64_t total = 0;
  for (const auto& id : ids) total += voxels(reader.case_shape(id));
  return total * per_voxel;
}

}  // namespace cache_detail

using namespace cache_detail;

int64_t available_bytes(CachePlacement placement, const torch::Device& device) {
  if (placement == CachePlacement::kGpu) {
    if (!torch::cuda::is_available() || !device.is_cuda()) return 0;
    size_t free = 0, total = 0;
    const int index = device.has_index() ? device.index() : 0;
    int previous = 0;
    U3D_CHECK_CUDA(cudaGetDevice(&previous));
    U3D_CHECK_CUDA(cudaSetDevice(index));
    U3D_CHECK_CUDA(cudaMemGetInfo(&free, &total));
    U3D_CHECK_CUDA(cudaSetDevice(previous));
    return static_cast<int64_t>(free);
  }
  return host_available_bytes();
}

CachePlacement resolve_placement(CachePlacement requested, double gpu_share, const torch::Device& device,
                                 int64_t needed_bytes) {
  if (!device.is_cuda()) {
    if (requested == CachePlacement::kGpu) {
      throw ConfigError(
          "data.cache: gpu needs training on a CUDA device, but this run trains on the CPU; use auto, "
          "pinned or memory");
    }
    return requested == CachePlacement::kAuto ? CachePlacement::kMemory : requested;
  }
  if (requested != CachePlacement::kAuto) return requested;
  const int64_t free = available_bytes(CachePlacement::kGpu, device);
  const bool fits = static_cast<double>(needed_bytes) <= gpu_share * static_cast<double>(free);
  spdlog::info("data.cache: auto: the cache needs about {}; {:.0f}% of the {} free GPU memory is {} -> {}",
               human_bytes(static_cast<double>(needed_bytes)), gpu_share * 100, human_bytes(static_cast<double>(free)),
               human_bytes(gpu_share * static_cast<double>(free)), fits ? "gpu" : "pinned");
  return fits ? CachePlacement::kGpu : CachePlacement::kPinned;
}

int64_t estimate_cache_bytes(const DatasetReader& reader, const std::vector<std::string>& ids, const Preprocessor& pre,
                             bool float16) {
  if (ids.empty()) return 0;
  return estimate_from(compact_case(source_or_reader(reader, {}), ids.front(), pre, float16), reader, ids, float16);
}

}  // namespace u3d
