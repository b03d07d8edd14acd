#include "u3d/data/preprocess.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "u3d/core/errors.h"
#include "u3d/core/text.h"

namespace u3d {

namespace {

// File channel index of each input channel (data.channels resolved against the file's names).
std::vector<int64_t> input_channel_indices(const DataConfig& data, const DatasetInfo& info) {
  std::vector<int64_t> out;
  if (data.channels.empty()) {
    for (size_t i = 0; i < info.channel_names.size(); ++i) out.push_back(static_cast<int64_t>(i));
    return out;
  }
  for (const auto& name : data.channels) {
    out.push_back(channel_index(info.channel_names, name, "data.channels", "in the dataset"));
  }
  return out;
}

}  // namespace

std::vector<std::string> resolve_normalization(const DataConfig& data, const DatasetInfo& info) {
  if (std::find(data.normalize.begin(), data.normalize.end(), "dataset") == data.normalize.end()) return data.normalize;
  const auto indices = input_channel_indices(data, info);
  if (data.normalize.size() != 1 && data.normalize.size() != indices.size()) return data.normalize;  // reported later
  std::vector<std::string> out;
  for (size_t i = 0; i < indices.size(); ++i) {
    const std::string& spec = data.normalize.size() == 1 ? data.normalize[0] : data.normalize[i];
    if (spec != "dataset") {
      out.push_back(spec);
    } else if (info.channel_normalization.empty()) {
      out.push_back("zscore");
    } else {
      out.push_back(info.channel_normalization[static_cast<size_t>(indices[i])]);
    }
  }
  return out;
}

Preprocessor::Preprocessor(const DataConfig& data, const DatasetInfo& info)
    : task_(info.task), num_classes_(info.num_classes), target_scale_(data.target_scale) {
  indices_ = input_channel_indices(data, info);
  for (const int64_t i : indices_) names_.push_back(info.channel_names[static_cast<size_t>(i)]);
  if (data.normalize.size() != 1 && data.normalize.size() != indices_.size()) {
    throw ConfigError(
        fmt::format("data.normalize: {} entries for {} input channels; give one entry (all "
                    "channels) or one per channel",
                    data.normalize.size(), indices_.size()));
  }
  const std::vector<std::string> specs = resolve_normalization(data, info);
  for (size_t i = 0; i < indices_.size(); ++i) {
    norms_.push_back(parse_channel_norm(specs.size() == 1 ? specs[0] : specs[i]));
  }
}

int64_t Preprocessor::out_channels() const { return task_ == Task::kSegmentation ? num_classes_ : 1; }

torch::Tensor Preprocessor::select_channels(const torch::Tensor& raw) const {
  const auto index = torch::tensor(indices_, torch::kLong);
  torch::Tensor x = raw.index_select(0, index.to(raw.device())).to(torch::kFloat).contiguous();  // (C, D, H, W)
  for (size_t c = 0; c < norms_.size(); ++c) {
    if (norms_[c].kind == ChannelNorm::Kind::kClip || norms_[c].kind == ChannelNorm::Kind::kCt) {
      x[static_cast<int64_t>(c)].clamp_(norms_[c].a, norms_[c].b);
    }
  }
  return x;
}

std::vector<Preprocessor::ChannelAffine> Preprocessor::channel_affines(const torch::Tensor& selected) const {
  std::vector<ChannelAffine> out(norms_.size());
  for (size_t c = 0; c < norms_.size(); ++c) {
    const ChannelNorm& n = norms_[c];
    ChannelAffine& a = out[c];
    switch (n.kind) {
      case ChannelNorm::Kind::kNone: break;
      case ChannelNorm::Kind::kZScore: {
        const torch::Tensor ch = selected[static_cast<int64_t>(c)];
        a.sub = ch.mean().item<float>();
        a.div = ch.std(/*unbiased=*/false).clamp_min(1e-6).item<float>();
        break;
      }
      case ChannelNorm::Kind::kClip:
        a.clamp = true;
        a.lo = n.a;
        a.hi = n.b;
        a.sub = static_cast<float>(n.a);
        a.div = static_cast<float>(n.b - n.a);
        break;
      case ChannelNorm::Kind::kScale: a.div = static_cast<float>(n.a); break;
      case ChannelNorm::Kind::kMinMax: {  // per case: (x - min) / (max - min)
        const torch::Tensor ch = selected[static_cast<int64_t>(c)];
        a.sub = ch.min().item<float>();
        a.div = std::max(ch.max().item<float>() - a.sub, 1e-8f);
        break;
      }
      case ChannelNorm::Kind::kCt:  // nnU-Net's CT scheme: clip to the dataset's percentiles, dataset z-score
        a.clamp = true;
        a.lo = n.a;
        a.hi = n.b;
        a.sub = static_cast<float>(n.mean);
        a.div = static_cast<float>(std::max(n.std, 1e-8));
        break;
    }
  }
  return out;
}

void normalize_(torch::Tensor& x, const torch::Tensor& sub, const torch::Tensor& div) { x.sub_(sub).div_(div); }

torch::Tensor Preprocessor::image(const torch::Tensor& raw) const {
  torch::Tensor x = select_channels(raw);  // (C, D, H, W) float32, clamped
  const auto affines = channel_affines(x);
  std::vector<float> sub, div;
  for (const ChannelAffine& a : affines) {
    sub.push_back(a.sub);
    div.push_back(a.div);
  }
  const auto c = static_cast<int64_t>(affines.size());
  normalize_(x, torch::tensor(sub).view({c, 1, 1, 1}), torch::tensor(div).view({c, 1, 1, 1}));
  return x;
}

torch::Tensor scale_target(const torch::Tensor& raw, double target_scale) {
  return raw.to(torch::kFloat).mul(static_cast<float>(1.0 / target_scale));
}

torch::Tensor Preprocessor::target(const torch::Tensor& raw) const {
  if (task_ == Task::kSegmentation) return raw;
  return scale_target(raw, target_scale_).unsqueeze(0).contiguous();
}

torch::Tensor Preprocessor::restore_target(const torch::Tensor& out) const {
  return task_ == Task::kSegmentation ? out : out * target_scale_;
}

std::shared_ptr<const Preprocessor> make_preprocessor(DataConfig& data, const DatasetInfo& info) {
  data.normalize = resolve_normalization(data, info);
  return std::make_shared<const Preprocessor>(data, info);
}

}  // namespace u3d
