#include "u3d/predict/raw_cases.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <map>
#include <optional>
#include <utility>

#include "u3d/core/errors.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

// "NAME_0003.nii.gz" -> {"NAME", 3}; nullopt without a four-digit channel suffix.
std::optional<std::pair<std::string, int64_t>> split_channel_name(const fs::path& file) {
  const std::string name = file.filename().string();
  const bool gz = name.size() > 7 && name.compare(name.size() - 7, 7, ".nii.gz") == 0;
  const std::string ending = gz ? ".nii.gz" : ".nii";
  const std::string stem = name.substr(0, name.size() - ending.size());
  if (stem.size() < 6 || stem[stem.size() - 5] != '_') return std::nullopt;
  const std::string digits = stem.substr(stem.size() - 4);
  if (!std::all_of(digits.begin(), digits.end(), [](char c) { return c >= '0' && c <= '9'; })) return std::nullopt;
  return std::make_pair(stem.substr(0, stem.size() - 5), static_cast<int64_t>(std::stol(digits)));
}

std::string suffix(int64_t channel) { return fmt::format("_{:04d}", channel); }

}  // namespace

std::vector<RawCase> find_raw_cases(const std::vector<fs::path>& inputs, int64_t channels) {
  std::vector<fs::path> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_directory(in, ec)) {
      std::vector<fs::path> found;
      for (const auto& e : fs::directory_iterator(in, ec)) {
        if (e.is_regular_file() && is_nifti_path(e.path()) && e.path().filename().string()[0] != '.') {
          found.push_back(e.path());
        }
      }
      if (found.empty()) {
        throw DataError(fmt::format("-i {}: no NIfTI files (.nii.gz, .nii) in this folder", in.string()));
      }
      files.insert(files.end(), found.begin(), found.end());
    } else if (!fs::exists(in, ec)) {
      throw UsageError(fmt::format("-i {}: no such file or folder", in.string()));
    } else if (!is_nifti_path(in)) {
      throw UsageError(fmt::format(
          "-i {}: not a NIfTI file (.nii.gz, .nii), an image (.png, .tif, .tiff) or a folder of them", in.string()));
    } else {
      files.push_back(in);
    }
  }
  std::map<std::string, std::map<int64_t, fs::path>> by_case;
  for (const auto& f : files) {
    const auto parts = split_channel_name(f);
    if (!parts) {
      throw UsageError(
          fmt::format("{}: not named as nnU-Net's input files: expected NAME_0000.nii.gz (then _0001, ... per channel)",
                      f.string()));
    }
    auto& slots = by_case[parts->first];
    const auto [it, inserted] = slots.emplace(parts->second, f);
    if (!inserted) {
      throw UsageError(fmt::format("case '{}': channel {} given twice ({} and {})", parts->first, suffix(parts->second),
                                   it->second.string(), f.string()));
    }
  }
  std::vector<RawCase> cases;
  for (const auto& [id, slots] : by_case) {
    RawCase c{id, {}};
    std::vector<std::string> present;
    bool complete = static_cast<int64_t>(slots.size()) == channels;
    for (const auto& [k, path] : slots) {
      present.push_back(suffix(k));
      complete = complete && k < channels;
      c.channels.push_back(path);
    }
    if (!complete) {
      throw UsageError(
          fmt::format("case '{}' ({}): channel files {} ({}); the model takes {} input channel(s): expected {}{}", id,
                      slots.begin()->second.parent_path().string(), fmt::join(present, ", "), present.size(), channels,
                      suffix(0), channels > 1 ? " to " + suffix(channels - 1) : std::string()));
    }
    cases.push_back(std::move(c));
  }
  return cases;
}

}  // namespace u3d
