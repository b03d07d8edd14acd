#include "u3d/data/batch.h"

namespace u3d {

Batch Batch::to(const torch::Device& device, bool non_blocking) const {
  Batch b;
  b.image = image.to(device, non_blocking);
  b.target = target.to(device, non_blocking);
  if (mask.defined()) b.mask = mask.to(device, non_blocking);
  if (maps.skeleton.defined()) b.maps.skeleton = maps.skeleton.to(device, non_blocking);
  if (maps.distance.defined()) b.maps.distance = maps.distance.to(device, non_blocking);
  b.cases = cases;
  b.epoch = epoch;
  b.step = step;
  return b;
}

int64_t RawBatch::bytes() const {
  int64_t total = 0;
  for (const auto& t : images) total += t.numel() * static_cast<int64_t>(t.element_size());
  for (const auto* t : {&target, &mask, &skeleton, &distance, &plan}) {
    if (t->defined()) total += t->numel() * static_cast<int64_t>(t->element_size());
  }
  return total;
}

RawBatch RawBatch::to(const torch::Device& device, bool non_blocking) const {
  RawBatch r;
  for (const auto& t : images) r.images.push_back(t.to(device, non_blocking));
  if (target.defined()) r.target = target.to(device, non_blocking);
  if (mask.defined()) r.mask = mask.to(device, non_blocking);
  if (skeleton.defined()) r.skeleton = skeleton.to(device, non_blocking);
  if (distance.defined()) r.distance = distance.to(device, non_blocking);
  r.plan = plan.to(device, non_blocking);
  r.cases = cases;
  r.epoch = epoch;
  r.step = step;
  return r;
}

void RawBatch::copy_to(RawBatch& dst, bool non_blocking) const {
  for (size_t i = 0; i < images.size(); ++i) dst.images[i].copy_(images[i], non_blocking);
  if (target.defined()) dst.target.copy_(target, non_blocking);
  if (mask.defined()) dst.mask.copy_(mask, non_blocking);
  if (skeleton.defined()) dst.skeleton.copy_(skeleton, non_blocking);
  if (distance.defined()) dst.distance.copy_(distance, non_blocking);
  dst.plan.copy_(plan, non_blocking);
  dst.cases = cases;
  dst.epoch = epoch;
  dst.step = step;
}

}  // namespace u3d
