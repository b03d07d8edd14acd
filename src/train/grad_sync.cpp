#include "u3d/train/grad_sync.h"

#include <torch/csrc/autograd/utils/lambda_post_hook.h>
#include <torch/csrc/autograd/variable.h>
#include <torch/csrc/distributed/c10d/ProcessGroup.hpp>

#include <chrono>

#include "u3d/core/errors.h"

namespace u3d {

struct GradientSync::Bucket {
  std::vector<size_t> params;
  std::vector<int64_t> offsets;  // element offset of each parameter in the buffer
  torch::Tensor buffer;          // (numel,) float32 on the parameters' device
  size_t ready = 0;              // gradients accumulated in this backward
  bool launched = false;
  c10::intrusive_ptr<c10d::Work> work;
};

std::vector<std::vector<size_t>> gradient_buckets(const std::vector<torch::Tensor>& params, int64_t cap_bytes,
                                                  int64_t first_cap_bytes) {
  std::vector<std::vector<size_t>> out;
  std::vector<size_t> current;
  int64_t bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {  // reverse: the order backward produces gradients
    const int64_t cap = out.empty() ? first_cap_bytes : cap_bytes;
    const int64_t size = params[k].numel() * static_cast<int64_t>(sizeof(float));
    if (!current.empty() && bytes + size > cap) {
      out.push_back(std::move(current));
      current.clear();
      bytes = 0;
    }
    current.push_back(k);
    bytes += size;
  }
  if (!current.empty()) out.push_back(std::move(current));
  return out;
}

GradientSync::GradientSync(std::vector<torch::Tensor> params, Distributed& dist, int64_t bucket_bytes,
                           int64_t first_bucket_bytes)
    : params_(std::move(params)), dist_(dist) {
  for (const auto& p : params_) {
    if (p.scalar_type() != torch::kFloat) {
      throw std::logic_error("GradientSync: parameters must be float32 (the optimizer keeps float32 weights)");
    }
  }
  buckets_ = gradient_buckets(params_, bucket_bytes, first_bucket_bytes);
  bucket_of_.assign(params_.size(), 0);
  bucket_slot_.assign(params_.size(), 0);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->params = buckets_[b];
    int64_t n = 0;
    for (size_t i : bucket->params) {
      bucket_of_[i] = b;
      bucket_slot_[i] = bucket->offsets.size();
      bucket->offsets.push_back(n);
      n += params_[i].numel();
    }
    bucket->buffer = torch::zeros({n}, params_[bucket->params[0]].options().requires_grad(false));
    state_.push_back(std::move(bucket));
  }
  bind_gradients();
}

torch::Tensor GradientSync::bucket_view(size_t param) const {
  const torch::Tensor& p = params_[param];
  const Bucket& b = *state_[bucket_of_[param]];
  const int64_t offset = b.offsets[bucket_slot_[param]];
  // The parameter's own strides (channels_last_3d included), as DDP's gradient_as_bucket_view: the
  // fused optimizer and the foreach kernels walk a parameter and its gradient in memory order.
  if (p.is_non_overlapping_and_dense()) return b.buffer.as_strided(p.sizes(), p.strides(), offset);
  return b.buffer.narrow(0, offset, p.numel()).view(p.sizes());
}

void GradientSync::bind_gradients() {
  torch::NoGradGuard no_grad;
  for (size_t i = 0; i < params_.size(); ++i) {
    torch::Tensor& g = params_[i].mutable_grad();
    const torch::Tensor view = bucket_view(i);
    if (g.defined() && g.data_ptr() == view.data_ptr() && g.strides() == view.strides()) continue;
    if (g.defined()) {
      view.copy_(g);  // a gradient set from outside (a layout change, a test) keeps its values
    } else {
      view.zero_();  // none: zero, as an unused parameter's
    }
    g = view;
  }
}

GradientSync::~GradientSync() = default;

int64_t GradientSync::buffer_bytes() const {
  int64_t n = 0;
  for (const auto& b : state_) n += b->buffer.numel() * static_cast<int64_t>(sizeof(float));
  return n;
}

void GradientSync::arm(bool reduce) {
  if (!hooked_) {
    // As c10d::Reducer: a post-hook on each parameter's gradient accumulator, which is kept alive
    // here (the parameter holds it weakly; a new one would come without the hook).
    for (size_t i = 0; i < params_.size(); ++i) {
      auto acc = torch::autograd::impl::grad_accumulator(params_[i]);
      if (!acc) throw std::logic_error("GradientSync: a parameter does not require a gradient");
      acc->add_post_hook(std::make_unique<torch::autograd::utils::LambdaPostHook>(
          [this, i](const torch::autograd::variable_list& outputs, const torch::autograd::variable_list&) {
            on_gradient(i);
            return outputs;
          }));
      accumulators_.push_back(std::move(acc));
    }
    hooked_ = true;
  }
  bind_gradients();  // host checks only, unless something replaced a gradient since the last step
  const std::lock_guard<std::mutex> lock(mutex_);
  armed_ = reduce && enabled_;
  next_launch_ = 0;
  for (auto& b : state_) {
    b->ready = 0;
    b->launched = false;
    b->work.reset();
  }
}

void GradientSync::on_gradient(size_t param) {
  const std::lock_guard<std::mutex> lock(mutex_);
  if (!armed_) return;
  ++state_[bucket_of_[param]]->ready;
  launch_ready();
}

void GradientSync::launch_ready() {
  while (next_launch_ < state_.size() && state_[next_launch_]->ready >= state_[next_launch_]->params.size()) {
    launch(*state_[next_launch_]);
    ++next_launch_;
  }
}

void GradientSync::launch(Bucket& b) {
  torch::NoGradGuard no_grad;
  // The gradients are views into the buffer (bind_gradients): nothing to copy in. The mean over
  // ranks (as DDP: divided before the sum; exact for 1, 2, 4, 8 ranks).
  if (dist_.world_size() > 1) b.buffer.div_(static_cast<double>(dist_.world_size()));
  std::vector<torch::Tensor> tensors{b.buffer};
  b.work = dist_.group()->allreduce(tensors);
  b.launched = true;
}

void GradientSync::finish() {
  std::unique_lock<std::mutex> lock(mutex_);
  if (!armed_) return;
  armed_ = false;
  for (; next_launch_ < state_.size(); ++next_launch_) launch(*state_[next_launch_]);  // unused parameters
  lock.unlock();
  for (auto& b : state_) {
    try {
      b->work->wait();  // the averaged gradients are in place: nothing to copy out
    } catch (const std::exception& e) {
      dist_.fail("the gradient all-reduce", e);
    }
    b->work.reset();
  }
}

std::vector<torch::Tensor> GradientSync::bucket_buffers() const {
  std::vector<torch::Tensor> out;
  for (const auto& b : state_) out.push_back(b->buffer);
  return out;
}

double GradientSync::reduce_seconds() {
  if (params_.empty()) return 0;
  const bool cuda = params_[0].is_cuda();
  std::vector<torch::Tensor> scratch;  // the buffers hold the gradients: reduce copies
  for (const auto& b : state_) scratch.push_back(b->buffer.clone());
  if (cuda) torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& buffer : scratch) {
    std::vector<torch::Tensor> tensors{buffer};
    works.push_back(dist_.group()->allreduce(tensors));
  }
  for (auto& w : works) w->wait();
  if (cuda) torch::cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace u3d
