// The grammar of a data.normalize entry, parsed in one place: the config checks each entry with
// channel_norm_problem(), the importers check what they record, and data/preprocess.h maps raw
// values with the parsed ChannelNorm.
#pragma once
#include <string>

namespace u3d {

// One channel's normalisation (data.normalize entry).
//   none | zscore (per case) | clip:LO:HI (clip, map to [0, 1]) | scale:S (divide) |
//   minmax (per case, map to [0, 1]) | ct:LO:HI:MEAN:STD (nnU-Net's CT scheme: clip to [LO, HI],
//   then (x - MEAN) / STD with dataset-wide foreground statistics, written by the importers) |
//   dataset (the spec the dataset file records for the channel; resolved before use)
struct ChannelNorm {
  enum class Kind { kNone, kZScore, kClip, kScale, kMinMax, kCt } kind = Kind::kNone;
  double a = 0, b = 0;       // clip and ct: [a, b]; scale: divisor a
  double mean = 0, std = 1;  // ct
};
// One data.normalize spec (none | zscore | minmax | clip:LO:HI | scale:S | ct:LO:HI:MEAN:STD): ""
// when valid (and *out filled), else the problem. "dataset" is resolved before and is not valid here.
std::string channel_norm_problem(const std::string& spec, ChannelNorm* out = nullptr);
ChannelNorm parse_channel_norm(const std::string& spec);  // ConfigError on a bad spec ("dataset" included)

}  // namespace u3d
