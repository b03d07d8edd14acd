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
  for (size_t b = 0; b < buckets_.size(); ++b) {
    auto bucket = std::make_unique<Bucket>();
    bucket->params = buckets_[b];
    int64_t n = 0;
    for (size_t i : bucket->params) {
      bucket_of_[i] = b;
      bucket->offsets.push_back(n);
      n += params_[i].numel();
    }
    bucket->buffer = torch::zeros({n}, params_[bucket->params[0]].options().requires_grad(false));
    state_.push_back(std::move(bucket));
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
  for (size_t k = 0; k < b.params.size(); ++k) {
    const torch::Tensor& p = params_[b.params[k]];
    torch::Tensor slice = b.buffer.narrow(0, b.offsets[k], p.numel()).view(p.sizes());
    const torch::Tensor& g = p.grad();
    if (g.defined()) {
      slice.copy_(g);
    } else {
      slice.zero_();  // no gradient on this rank: it adds nothing to the sum
    }
  }
  // The mean over ranks (as DDP: divided before the sum; exact for 1, 2, 4, 8 ranks).
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
  torch::NoGradGuard no_grad;
  for (auto& b : state_) {
    try {
      b->work->wait();
    } catch (const std::exception& e) {
      dist_.fail("the gradient all-reduce", e);
    }
    for (size_t k = 0; k < b->params.size(); ++k) {
      torch::Tensor& p = params_[b->params[k]];
      const torch::Tensor slice = b->buffer.narrow(0, b->offsets[k], p.numel()).view(p.sizes());
      torch::Tensor& g = p.mutable_grad();
      if (g.defined()) {
        g.copy_(slice);
      } else {
        g = torch::empty_like(p).copy_(slice);
      }
    }
    b->work.reset();
  }
}

double GradientSync::reduce_seconds() {
  if (params_.empty()) return 0;
  const bool cuda = params_[0].is_cuda();
  if (cuda) torch::cuda::synchronize();
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<c10::intrusive_ptr<c10d::Work>> works;
  for (auto& b : state_) {
    std::vector<torch::Tensor> tensors{b->buffer};
    works.push_back(dist_.group()->allreduce(tensors));
  }
  for (auto& w : works) w->wait();
  if (cuda) torch::cuda::synchronize();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace u3d
