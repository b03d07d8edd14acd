#include "u3d/preprocess.h"

#include <algorithm>

#include "u3d/errors.h"

namespace u3d {

ChannelNorm parse_channel_norm(const std::string& spec) {
  ChannelNorm n;
  if (spec == "none") return n;
  if (spec == "zscore") {
    n.kind = ChannelNorm::Kind::kZScore;
    return n;
  }
  try {
    if (spec.rfind("clip:", 0) == 0) {
      const auto rest = spec.substr(5);
      const auto colon = rest.find(':');
      n.kind = ChannelNorm::Kind::kClip;
      n.a = std::stod(rest.substr(0, colon));
      n.b = std::stod(rest.substr(colon + 1));
      if (colon != std::string::npos && n.b > n.a) return n;
    } else if (spec.rfind("scale:", 0) == 0) {
      n.kind = ChannelNorm::Kind::kScale;
      n.a = std::stod(spec.substr(6));
      if (n.a != 0) return n;
    }
  } catch (const std::exception&) {
  }
  throw ConfigError(fmt::format("data.normalize: '{}' is not one of none|zscore|clip:LO:HI|scale:S", spec));
}

Preprocessor::Preprocessor(const DataConfig& data, const DatasetInfo& info)
    : task_(info.task), num_classes_(info.num_classes), target_scale_(data.target_scale) {
  if (data.channels.empty()) {
    for (size_t i = 0; i < info.channel_names.size(); ++i) {
      indices_.push_back(static_cast<int64_t>(i));
      names_.push_back(info.channel_names[i]);
    }
  } else {
    for (const auto& name : data.channels) {
      const auto it = std::find(info.channel_names.begin(), info.channel_names.end(), name);
      if (it == info.channel_names.end()) {
        throw ConfigError(fmt::format("data.channels: channel '{}' is not in the dataset; it has: {}", name,
                                      fmt::join(info.channel_names, ", ")));
      }
      indices_.push_back(it - info.channel_names.begin());
      names_.push_back(name);
    }
  }
  if (data.normalize.size() != 1 && data.normalize.size() != indices_.size()) {
    throw ConfigError(fmt::format("data.normalize: {} entries for {} input channels; give one entry (all "
                                  "channels) or one per channel",
                                  data.normalize.size(), indices_.size()));
  }
  for (size_t i = 0; i < indices_.size(); ++i) {
    norms_.push_back(parse_channel_norm(data.normalize.size() == 1 ? data.normalize[0] : data.normalize[i]));
  }
}

int64_t Preprocessor::out_channels() const { return task_ == Task::kSegmentation ? num_classes_ : 1; }

torch::Tensor Preprocessor::select_channels(const torch::Tensor& raw) const {
  const auto index = torch::tensor(indices_, torch::kLong);
  torch::Tensor x = raw.index_select(0, index.to(raw.device())).to(torch::kFloat).contiguous();  // (C, D, H, W)
  for (size_t c = 0; c < norms_.size(); ++c) {
    if (norms_[c].kind == ChannelNorm::Kind::kClip) x[static_cast<int64_t>(c)].clamp_(norms_[c].a, norms_[c].b);
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
    }
  }
  return out;
}

torch::Tensor Preprocessor::image(const torch::Tensor& raw) const {
  torch::Tensor x = select_channels(raw);  // (C, D, H, W) float32, clamped
  const auto affines = channel_affines(x);
  for (size_t c = 0; c < affines.size(); ++c) {
    const ChannelAffine& a = affines[c];
    if (a.sub != 0.0f || a.div != 1.0f) x[static_cast<int64_t>(c)].sub_(a.sub).div_(a.div);
  }
  return x;
}

torch::Tensor Preprocessor::target(const torch::Tensor& raw) const {
  if (task_ == Task::kSegmentation) return raw;
  return (raw.to(torch::kFloat) / target_scale_).unsqueeze(0).contiguous();
}

torch::Tensor Preprocessor::restore_target(const torch::Tensor& out) const {
  return task_ == Task::kSegmentation ? out : out * target_scale_;
}

}  // namespace u3d
