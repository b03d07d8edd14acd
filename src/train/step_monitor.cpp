#include "u3d/train/step_monitor.h"

namespace u3d {

StepMonitor::StepMonitor(const torch::Device& device, int64_t terms)
    : loss_sum_(torch::zeros({}, torch::TensorOptions().dtype(torch::kDouble).device(device))),
      term_sums_(torch::zeros({terms}, torch::TensorOptions().dtype(torch::kDouble).device(device))),
      counters_(torch::zeros({4}, torch::TensorOptions().dtype(torch::kLong).device(device))) {}

void StepMonitor::record(const torch::Tensor& loss, const torch::Tensor& found_inf, const torch::Tensor& terms) {
  torch::NoGradGuard no_grad;
  const torch::Tensor skip = found_inf.to(torch::kLong);  // () 0/1
  const torch::Tensor finite_loss =
      torch::where(found_inf > 0, torch::zeros_like(loss_sum_), loss.detach().to(torch::kDouble));
  loss_sum_.add_(finite_loss);
  if (terms.defined() && term_sums_.numel() == terms.numel()) {
    term_sums_.add_(terms.detach().to(torch::kDouble) * (1 - found_inf.to(torch::kDouble)));
  }
  counters_.narrow(0, 0, 2).add_(skip);                      // skipped: epoch, run
  const torch::Tensor in_a_row = (counters_[2] + 1) * skip;  // reset to 0 by a good step
  counters_[2].copy_(in_a_row);
  counters_[3].copy_(torch::maximum(counters_[3], in_a_row));
}

StepMonitor::Totals StepMonitor::totals() const {
  if (before_read_) before_read_();
  const torch::Tensor c = counters_.cpu();
  const auto* p = c.data_ptr<int64_t>();
  Totals t;
  t.loss_sum = loss_sum_.item<double>();
  const torch::Tensor terms = term_sums_.cpu();
  t.term_sums.assign(terms.data_ptr<double>(), terms.data_ptr<double>() + terms.numel());
  t.skipped = p[0];
  t.skipped_total = p[1];
  t.skipped_in_a_row = p[2];
  t.longest_run = p[3];
  return t;
}

void StepMonitor::start_epoch() {
  loss_sum_.zero_();
  term_sums_.zero_();
  counters_[0].zero_();
}

void StepMonitor::reset_longest_run() { counters_[3].copy_(counters_[2]); }

void StepMonitor::restore(const TrainState& s) {
  loss_sum_.fill_(s.epoch_loss_sum);
  term_sums_.zero_();
  if (static_cast<int64_t>(s.epoch_term_sums.size()) == term_sums_.numel() && term_sums_.numel() > 0) {
    term_sums_.copy_(torch::tensor(s.epoch_term_sums, torch::kDouble));
  }
  counters_.copy_(
      torch::tensor({s.epoch_skipped, s.skipped_total, s.skipped_in_a_row, s.skipped_in_a_row}, torch::kLong));
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
