#include "u3d/train/step_monitor.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

namespace u3d {

struct StepMonitor::CopyEvent {
  at::cuda::CUDAEvent event;
};

StepMonitor::StepMonitor(const torch::Device& device, int64_t terms)
    : terms_(terms),
      state_(torch::zeros({1 + terms + 4}, torch::TensorOptions().dtype(torch::kDouble).device(device))) {
  if (device.is_cuda()) {
    const auto pinned = torch::TensorOptions().dtype(torch::kDouble).pinned_memory(true);
    read_host_ = torch::zeros({state_.numel()}, pinned);
    async_host_ = torch::zeros({state_.numel()}, pinned);
    copied_ = std::make_unique<CopyEvent>();
  }
  latest_.totals.term_sums.assign(static_cast<size_t>(terms_), 0.0);
}

StepMonitor::~StepMonitor() = default;

void StepMonitor::record(const torch::Tensor& loss, const torch::Tensor& found_inf, const torch::Tensor& terms) {
  torch::NoGradGuard no_grad;
  const torch::Tensor skip = found_inf.to(torch::kDouble);  // () 0/1
  torch::Tensor sum = loss_sum();
  sum.add_(torch::where(found_inf > 0, torch::zeros_like(sum), loss.detach().to(torch::kDouble)));
  if (terms.defined() && terms_ == terms.numel()) {
    term_sums().add_(terms.detach().to(torch::kDouble) * (1 - skip));
  }
  const torch::Tensor c = counters();
  c.narrow(0, 0, 2).add_(skip);                      // skipped: epoch, run
  const torch::Tensor in_a_row = (c[2] + 1) * skip;  // reset to 0 by a good step
  c[2].copy_(in_a_row);
  c[3].copy_(torch::maximum(c[3], in_a_row));
}

StepMonitor::Totals StepMonitor::unpack(const double* p) const {
  Totals t;
  t.loss_sum = p[0];
  t.term_sums.assign(p + 1, p + 1 + terms_);
  const double* c = p + 1 + terms_;
  t.skipped = static_cast<int64_t>(c[0]);
  t.skipped_total = static_cast<int64_t>(c[1]);
  t.skipped_in_a_row = static_cast<int64_t>(c[2]);
  t.longest_run = static_cast<int64_t>(c[3]);
  return t;
}

StepMonitor::Totals StepMonitor::totals() const {
  if (before_read_) before_read_();
  if (!state_.is_cuda()) {
    const torch::Tensor host = state_.cpu();  // the state itself on the CPU
    return unpack(host.data_ptr<double>());
  }
  read_host_.copy_(state_);  // the one synchronous copy
  return unpack(read_host_.data_ptr<double>());
}

void StepMonitor::request(int64_t steps) {
  if (!state_.is_cuda()) {
    latest_.totals = totals();
    latest_.steps = steps;
    return;
  }
  poll();  // a completed copy is taken before the buffer is written again
  async_host_.copy_(state_, /*non_blocking=*/true);
  copied_->event.record(c10::cuda::getCurrentCUDAStream(state_.device().index()));
  in_flight_ = true;
  in_flight_steps_ = steps;
  in_flight_epoch_ = epoch_;
}

void StepMonitor::poll() {
  if (!in_flight_ || !copied_->event.query()) return;
  in_flight_ = false;
  if (in_flight_epoch_ != epoch_) return;  // the sums of an ended epoch
  latest_.totals = unpack(async_host_.data_ptr<double>());
  latest_.steps = in_flight_steps_;
}

StepMonitor::Snapshot StepMonitor::latest() {
  poll();
  return latest_;
}

void StepMonitor::start_epoch() {
  loss_sum().zero_();
  term_sums().zero_();
  counters()[0].zero_();
  ++epoch_;
  latest_ = Snapshot{};
  latest_.totals.term_sums.assign(static_cast<size_t>(terms_), 0.0);
}

void StepMonitor::reset_longest_run() {
  const torch::Tensor c = counters();
  c[3].copy_(c[2]);
}

void StepMonitor::restore(const TrainState& s) {
  std::vector<double> packed(static_cast<size_t>(state_.numel()), 0.0);
  packed[0] = s.epoch_loss_sum;
  if (static_cast<int64_t>(s.epoch_term_sums.size()) == terms_) {
    std::copy(s.epoch_term_sums.begin(), s.epoch_term_sums.end(), packed.begin() + 1);
  }
  const auto c = packed.begin() + 1 + terms_;
  c[0] = static_cast<double>(s.epoch_skipped);
  c[1] = static_cast<double>(s.skipped_total);
  c[2] = static_cast<double>(s.skipped_in_a_row);
  c[3] = static_cast<double>(s.skipped_in_a_row);
  state_.copy_(torch::tensor(packed, torch::kDouble));
  ++epoch_;
  latest_ = Snapshot{};
  latest_.totals.term_sums.assign(static_cast<size_t>(terms_), 0.0);
}

void StepMonitor::store(TrainState& s) const {
  const Totals t = totals();
  s.epoch_loss_sum = t.loss_sum;
  s.epoch_term_sums = t.term_sums;
  s.epoch_skipped = t.skipped;
  s.skipped_total = t.skipped_total;
  s.skipped_in_a_row = t.skipped_in_a_row;
}

}  // namespace u3d
