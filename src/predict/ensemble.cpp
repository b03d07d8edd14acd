#include "u3d/predict/ensemble.h"

#include <cmath>
#include <numeric>

#include "u3d/core/errors.h"

namespace u3d {

EnsembleNetworkImpl::EnsembleNetworkImpl(std::vector<Network> members, Task task, Head head)
    : members_(std::move(members)), task_(task), head_(head) {
  if (members_.empty()) throw ConfigError("ensemble: no member networks");
  for (size_t k = 0; k < members_.size(); ++k) {
    register_module("member" + std::to_string(k), members_[k]);
    divisor_ = std::lcm(divisor_, members_[k]->size_divisor());
  }
}

torch::Tensor EnsembleNetworkImpl::forward(const torch::Tensor& x) {
  if (task_ == Task::kSegmentation && head_ == Head::kSigmoid) {
    if (members_.size() == 1) return members_.front()->forward(x).to(torch::kFloat);
    torch::Tensor sum;
    for (auto& m : members_) {
      const torch::Tensor p = torch::sigmoid(m->forward(x).to(torch::kFloat));
      sum = sum.defined() ? sum + p : p;
    }
    return torch::logit(sum / static_cast<double>(members_.size()), /*eps=*/1e-6);
  }
  if (task_ == Task::kSegmentation) {
    // log(mean_k p_k) = logsumexp_k(log p_k) - log K, stable for probabilities near 0.
    std::vector<torch::Tensor> log_probs;
    log_probs.reserve(members_.size());
    for (auto& m : members_) log_probs.push_back(torch::log_softmax(m->forward(x).to(torch::kFloat), /*dim=*/1));
    if (log_probs.size() == 1) return log_probs.front();
    return torch::logsumexp(torch::stack(log_probs), /*dim=*/0) - std::log(static_cast<double>(members_.size()));
  }
  torch::Tensor sum;
  for (auto& m : members_) {
    auto y = m->forward(x).to(torch::kFloat);
    sum = sum.defined() ? sum + y : y;
  }
  return sum / static_cast<double>(members_.size());
}

}  // namespace u3d
