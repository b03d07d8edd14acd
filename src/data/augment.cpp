#include "u3d/augment.h"

namespace u3d {

std::array<bool, 3> draw_flips(Rng& rng, double p) {
  std::array<bool, 3> axes{};
  for (auto& a : axes) a = rng.bernoulli(p);
  return axes;
}

void apply_flips(Sample& s, const std::array<bool, 3>& axes) {
  std::vector<int64_t> dims;
  for (int a = 0; a < 3; ++a) {
    if (axes[static_cast<size_t>(a)]) dims.push_back(a - 3);  // spatial axes are the last three
  }
  if (dims.empty()) return;
  for (torch::Tensor* t : {&s.image, &s.target, &s.mask}) {
    if (t->defined()) *t = torch::flip(*t, dims);
  }
}

void augment_sample(Sample& s, const AugmentConfig& cfg, Rng& rng) {
  if (cfg.flip_prob > 0) apply_flips(s, draw_flips(rng, cfg.flip_prob));
}

}  // namespace u3d
