// What the network sees of each input channel after normalisation (Preprocessor::image), gathered
// over the cases a run checks, and the two normalisation mistakes that otherwise train silently:
//   nearly constant: the channel's standard deviation is below kConstantStd in every case (data
//     already scaled, e.g. CT in [0, 1] under a `ct:` or `clip:` spec, or a `scale:` far too large);
//   far outside ±10: more than kFarShare of its voxels beyond ±kFar (raw values under `none`, e.g.
//     CT in Hounsfield units).
// Each is one warning line per channel with the numbers (DataProblem, field "image", no case).
#pragma once
#include <torch/torch.h>

#include <limits>
#include <mutex>
#include <string>
#include <vector>

#include "u3d/data/data_problem.h"

namespace u3d {

class InputRangeCheck {
 public:
  static constexpr double kConstantStd = 1e-3;
  static constexpr double kFar = 10;
  static constexpr double kFarShare = 0.01;

  // One name per input channel; `specs` data.normalize as resolved (one entry, or one per channel).
  InputRangeCheck(std::vector<std::string> channel_names, std::vector<std::string> specs);
  // (C, D, H, W) float32 network inputs of one case. Thread-safe.
  void add(const torch::Tensor& inputs);
  // One warning per channel that is nearly constant or far outside ±kFar; none before add().
  std::vector<DataProblem> warnings() const;

 private:
  struct Channel {
    int64_t cases = 0;
    int64_t voxels = 0;
    int64_t beyond = 0;  // voxels with |x| > kFar
    double min = std::numeric_limits<double>::infinity();
    double max = -std::numeric_limits<double>::infinity();
    double max_std = 0;  // the largest per-case standard deviation
  };
  std::vector<std::string> names_;
  std::vector<std::string> specs_;
  mutable std::mutex mutex_;
  std::vector<Channel> channels_;
};

}  // namespace u3d
