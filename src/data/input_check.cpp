#include "u3d/data/input_check.h"

#include <fmt/format.h>

#include <algorithm>

namespace u3d {

InputRangeCheck::InputRangeCheck(std::vector<std::string> channel_names, std::vector<std::string> specs)
    : names_(std::move(channel_names)), specs_(std::move(specs)), channels_(names_.size()) {}

void InputRangeCheck::add(const torch::Tensor& inputs) {
  const int64_t n = std::min<int64_t>(inputs.size(0), static_cast<int64_t>(channels_.size()));
  std::vector<Channel> found(static_cast<size_t>(n));
  for (int64_t c = 0; c < n; ++c) {
    const torch::Tensor x = inputs[c].to(torch::kDouble);
    Channel& f = found[static_cast<size_t>(c)];
    if (x.numel() == 0) continue;
    f.cases = 1;
    f.voxels = x.numel();
    f.beyond = (x.abs() > kFar).sum().item<int64_t>();
    f.min = x.min().item<double>();
    f.max = x.max().item<double>();
    f.max_std = x.std(/*unbiased=*/false).item<double>();
  }
  std::lock_guard<std::mutex> lock(mutex_);
  for (size_t c = 0; c < found.size(); ++c) {
    Channel& a = channels_[c];
    const Channel& f = found[c];
    if (f.cases == 0) continue;
    a.cases += f.cases;
    a.voxels += f.voxels;
    a.beyond += f.beyond;
    a.min = std::min(a.min, f.min);
    a.max = std::max(a.max, f.max);
    a.max_std = std::max(a.max_std, f.max_std);
  }
}

std::vector<DataProblem> InputRangeCheck::warnings() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<DataProblem> out;
  for (size_t c = 0; c < channels_.size(); ++c) {
    const Channel& a = channels_[c];
    if (a.cases == 0) continue;
    const std::string spec = specs_.empty()       ? ""
                             : specs_.size() == 1 ? specs_[0]
                                                  : specs_[std::min(c, specs_.size() - 1)];
    const std::string head = fmt::format("channel '{}' after data.normalize `{}`", names_[c], spec);
    const double share = static_cast<double>(a.beyond) / static_cast<double>(std::max<int64_t>(a.voxels, 1));
    if (a.max_std < kConstantStd) {
      out.push_back(DataProblem{
          DataProblem::Severity::kWarning, "", "image",
          fmt::format("{} is nearly constant: standard deviation at most {:.3g} in each of {} case(s), values in "
                      "[{:.4g}, {:.4g}]; is the data already scaled (e.g. CT in [0, 1])? check data.normalize",
                      head, a.max_std, a.cases, a.min, a.max)});
    } else if (share > kFarShare) {
      out.push_back(DataProblem{
          DataProblem::Severity::kWarning, "", "image",
          fmt::format("{} is far outside ±{:g}: values in [{:.4g}, {:.4g}], {:.1f}% of {} voxels in {} case(s) "
                      "beyond ±{:g}; raw values (e.g. CT in HU)? check data.normalize",
                      head, kFar, a.min, a.max, 100 * share, a.voxels, a.cases, kFar)});
    }
  }
  return out;
}

}  // namespace u3d
