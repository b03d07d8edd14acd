#include "u3d/core/normalize_spec.h"

#include <fmt/format.h>

#include <cmath>
#include <cstdlib>

#include "u3d/core/errors.h"

namespace u3d {

std::string channel_norm_problem(const std::string& spec, ChannelNorm* out) {
  ChannelNorm n;
  auto parse_num = [](const std::string& s, double& v) {  // the whole string, finite
    char* end = nullptr;
    v = std::strtod(s.c_str(), &end);
    return !s.empty() && end == s.c_str() + s.size() && std::isfinite(v);
  };
  std::string problem;
  if (spec == "none") {
  } else if (spec == "zscore") {
    n.kind = ChannelNorm::Kind::kZScore;
  } else if (spec == "minmax") {
    n.kind = ChannelNorm::Kind::kMinMax;
  } else if (spec.rfind("clip:", 0) == 0) {
    const auto rest = spec.substr(5);
    const auto colon = rest.find(':');
    n.kind = ChannelNorm::Kind::kClip;
    if (colon == std::string::npos || !parse_num(rest.substr(0, colon), n.a) ||
        !parse_num(rest.substr(colon + 1), n.b) || !(n.b > n.a)) {
      problem = fmt::format("'{}' is not clip:LO:HI with LO < HI", spec);
    }
  } else if (spec.rfind("scale:", 0) == 0) {
    n.kind = ChannelNorm::Kind::kScale;
    if (!parse_num(spec.substr(6), n.a) || n.a == 0) problem = fmt::format("'{}' is not scale:S with S != 0", spec);
  } else if (spec.rfind("ct:", 0) == 0) {
    std::vector<double> v;
    size_t pos = 3;
    while (pos <= spec.size()) {
      const size_t colon = spec.find(':', pos);
      double x = 0;
      if (!parse_num(spec.substr(pos, colon == std::string::npos ? std::string::npos : colon - pos), x)) break;
      v.push_back(x);
      if (colon == std::string::npos) break;
      pos = colon + 1;
    }
    if (v.size() == 4 && v[1] > v[0] && v[3] > 0) {
      n = ChannelNorm{ChannelNorm::Kind::kCt, v[0], v[1], v[2], v[3]};
    } else {
      problem = fmt::format("'{}' is not ct:LO:HI:MEAN:STD with LO < HI and STD > 0", spec);
    }
  } else {
    problem = fmt::format("'{}' is not one of none|zscore|minmax|clip:LO:HI|scale:S|ct:LO:HI:MEAN:STD|dataset", spec);
  }
  if (problem.empty() && out) *out = n;
  return problem;
}

ChannelNorm parse_channel_norm(const std::string& spec) {
  ChannelNorm n;
  const std::string problem = channel_norm_problem(spec, &n);
  if (!problem.empty()) throw ConfigError("data.normalize: " + problem);
  return n;
}

}  // namespace u3d
