#include "u3d/kernels/fused_families.h"

#include <atomic>

namespace u3d::kernels {
namespace {

std::atomic<Families> enabled_{kNoFamilies};

}  // namespace

const std::vector<Family>& all_families() {
  static const std::vector<Family> families = {Family::kBatchNorm, Family::kGroupNorm, Family::kDecoderConcat,
                                               Family::kLoss};
  return families;
}

std::string family_name(Family family) {
  switch (family) {
    case Family::kBatchNorm: return "batch_norm";
    case Family::kGroupNorm: return "group_norm";
    case Family::kDecoderConcat: return "decoder_concat";
    case Family::kLoss: return "loss";
  }
  return "unknown";
}

std::string family_names(Families families) {
  std::string out;
  for (const Family f : all_families()) {
    if ((families & bit(f)) == 0) continue;
    out += (out.empty() ? "" : ", ") + family_name(f);
  }
  return out.empty() ? "none" : out;
}

void set_enabled(Families families) { enabled_.store(families & kAllFamilies); }
Families enabled_families() { return enabled_.load(); }
bool enabled(Family family) { return (enabled_.load() & bit(family)) != 0; }

}  // namespace u3d::kernels
