// Which families of the project's fused kernels are on, process-wide: set from model.fused_kernels by
// the training step (model/fused_kernels.h, one family at a time as each is verified on a GPU), read
// by the layers that can take them. All off by default, so prediction, export and tests take ATen
// unless they ask.
//
//   batch_norm      batch norm + activation (kernels/fused_norm_act.h)
//   group_norm      instance and group norm + activation (kernels/fused_norm_act.h)
//   decoder_concat  each decoder's first convolution over (up, skip) without the concatenation copy
//                   (model/split_concat_conv.h)
//   loss            Dice + cross-entropy and BCE + Dice in one pass each way (kernels/fused_loss.h)
#pragma once
#include <string>
#include <vector>

namespace u3d::kernels {

enum class Family : unsigned { kBatchNorm = 1u << 0, kGroupNorm = 1u << 1, kDecoderConcat = 1u << 2, kLoss = 1u << 3 };

// A set of families: the bits of Family.
using Families = unsigned;
inline constexpr Families kNoFamilies = 0;
inline constexpr Families kAllFamilies = 0xFu;
inline constexpr Families bit(Family f) { return static_cast<Families>(f); }

// Every family, in the order above; its name as the log and docs/performance.md write it ("batch_norm").
const std::vector<Family>& all_families();
std::string family_name(Family family);
// "batch_norm, loss"; "none" for the empty set.
std::string family_names(Families families);

void set_enabled(Families families);
Families enabled_families();
bool enabled(Family family);

}  // namespace u3d::kernels
