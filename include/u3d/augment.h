// Spatial augmentation of training patches. Every random choice comes from the caller's Rng, so a
// sample's augmentation is a pure function of (seed, epoch, sample index).
#pragma once
#include <torch/torch.h>

#include <array>

#include "u3d/config.h"
#include "u3d/rng.h"

namespace u3d {

// One sample's patch: image (C, d, h, w), target (1, d, h, w) or (d, h, w), mask (1, d, h, w) or undefined.
struct Sample {
  torch::Tensor image;
  torch::Tensor target;
  torch::Tensor mask;
};

// Draws which of the three spatial axes to mirror (each with probability p).
std::array<bool, 3> draw_flips(Rng& rng, double p);
// Mirrors the chosen spatial axes (the last three dimensions) of every field of `s`.
void apply_flips(Sample& s, const std::array<bool, 3>& axes);

// Draws and applies the augmentations configured in `cfg` to `s`.
void augment_sample(Sample& s, const AugmentConfig& cfg, Rng& rng);

}  // namespace u3d
