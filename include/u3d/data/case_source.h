// How a cache reads a case: one case's raw read, in DatasetReader::read_case's form (io/h5/dataset.h:
// CaseData). An empty CaseSource is reader.read_case; the trainer passes CheckedReader::read
// (preflight.h), so each case is read and checked once. Handed to the caches (cache.h:
// TensorCache::load, CacheOptions::read).
#pragma once
#include <functional>
#include <string>

#include "u3d/io/h5/dataset.h"

namespace u3d {

using CaseSource = std::function<CaseData(const std::string& id)>;

}  // namespace u3d
