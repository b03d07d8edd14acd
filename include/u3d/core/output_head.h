// The segmentation head (model.head): how the network's output channels map to the K classes.
//   softmax: K channels of logits, one per class (background included); labels by argmax.
//   sigmoid: K - 1 channels of logits, channel k - 1 = label k (one-hot without background); each
//            channel's sigmoid is the probability of its label on its own (binary: one channel).
// A regression head is always one channel (model.head stays softmax, its default).
#pragma once
#include <cstdint>

#include "u3d/core/config.h"

namespace u3d {

// The network's output channels for `classes` (the dataset's K for segmentation, 1 for regression):
// K - 1 with a sigmoid head, else `classes`.
int64_t network_channels(Head head, int64_t classes);

// ConfigError (one line naming the key) when training.loss does not fit model.head: ce and dice_ce
// (and the list terms ce, cldice, skeleton_recall, boundary) need softmax; bce needs sigmoid;
// training.class_weights (ce only) with sigmoid. Called by validate().
void validate_head(const Config& cfg);

}  // namespace u3d
