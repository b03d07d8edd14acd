// check_fingerprint (plan/fingerprint.h): a stored fingerprint is used only when it describes the
// dataset beside it; what the file's metadata can confirm is compared with it, the rest must be sane.
#include <fmt/format.h>

#include <cmath>
#include <map>
#include <utility>

#include "u3d/core/errors.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"
#include "u3d/plan/fingerprint.h"

namespace u3d {

void check_fingerprint(const DatasetFingerprint& fp, const DatasetReader& reader, const std::string& source) {
  const DatasetInfo& info = reader.info();
  const auto fail = [&](const std::string& field, const std::string& what) {
    throw DataError(fmt::format("{}: {}: {}", source, field, what));
  };
  const auto finite_or_fail = [&](const std::string& field, double v) {
    if (!std::isfinite(v)) fail(field, fmt::format("{} is not a finite number", v));
  };
  const auto share_or_fail = [&](const std::string& field, double v) {
    if (!(v >= 0 && v <= 1)) fail(field, fmt::format("{} is not a share in [0, 1]", v));
  };
  if (fp.task != info.task)
    fail("task", fmt::format("{}, the dataset's is {}", to_string(fp.task), to_string(info.task)));
  if (fp.channel_names != info.channel_names || fp.channels.size() != info.channel_names.size()) {
    fail("channels", fmt::format("{} channels, the dataset has {}", fp.channels.size(), info.channel_names.size()));
  }
  const std::vector<std::string> planned = planning_case_ids(reader);  // test cases are never fingerprinted
  if (fp.cases.size() != planned.size()) {
    fail("cases", fmt::format("{} cases, the dataset has {} outside its test split", fp.cases.size(), planned.size()));
  }
  int64_t total = 0;
  for (size_t i = 0; i < fp.cases.size(); ++i) {
    const CaseFingerprint& c = fp.cases[i];
    const std::string field = fmt::format("cases[{}]", i);
    if (c.id != planned[i]) fail(field + ".id", fmt::format("'{}', the dataset's case is '{}'", c.id, planned[i]));
    const Shape3 shape = reader.case_shape(c.id);
    if (c.shape != shape) {
      fail(field + ".shape",
           fmt::format("{} for case '{}', the dataset holds {}", shape_text(c.shape), c.id, shape_text(shape)));
    }
    if (c.spacing != reader.case_spacing(c.id)) {
      fail(field + ".spacing", fmt::format("{} x {} x {} mm for case '{}', not the dataset's", c.spacing[0],
                                           c.spacing[1], c.spacing[2], c.id));
    }
    total += shape[0] * shape[1] * shape[2];
  }
  if (fp.total_voxels != total) fail("total_voxels", fmt::format("{}, the cases hold {}", fp.total_voxels, total));
  for (int a = 0; a < 3; ++a) {
    std::vector<double> shape, spacing;
    for (const auto& c : fp.cases) {
      shape.push_back(static_cast<double>(c.shape[a]));
      spacing.push_back(c.spacing[a]);
    }
    if (fp.median_shape[a] != std::llround(percentile(shape, 50.0)) ||
        fp.median_spacing[a] != percentile(spacing, 50.0)) {
      fail("median_shape", "not the median of the cases' shapes and spacings");
    }
  }
  if (fp.splits != split_counts(info, planned)) fail("splits", "not the dataset's splits");
  for (size_t k = 0; k < fp.channels.size(); ++k) {
    const ChannelFingerprint& ch = fp.channels[k];
    const std::string field = fmt::format("channels[{}]", k);
    const std::pair<const char*, double> stats[] = {{"mean", ch.mean},   {"std", ch.std}, {"p00_5", ch.p00_5},
                                                    {"p99_5", ch.p99_5}, {"min", ch.min}, {"max", ch.max}};
    for (const auto& [name, v] : stats) {
      finite_or_fail(field + "." + name, v);
    }
    if (!(ch.std >= 0 && ch.min <= ch.p00_5 && ch.p00_5 <= ch.p99_5 && ch.p99_5 <= ch.max && ch.samples >= 0)) {
      fail(field, "its statistics are out of order (expected std >= 0 and min <= p0.5 <= p99.5 <= max)");
    }
  }
  share_or_fail("mask_share", fp.mask_share);
  finite_or_fail("target_min", fp.target_min);
  finite_or_fail("target_max", fp.target_max);
  if (fp.target_min > fp.target_max) fail("target_min", "above target_max");
  if (info.task != Task::kSegmentation) return;
  if (fp.num_classes != info.num_classes || fp.class_frequency.size() != static_cast<size_t>(info.num_classes)) {
    fail("num_classes", fmt::format("{} classes, the dataset has {}", fp.num_classes, info.num_classes));
  }
  if (fp.ignore_label != info.ignore_label) {
    fail("ignore_label", fmt::format("{}, the dataset's is {}", fp.ignore_label, info.ignore_label));
  }
  for (size_t c = 0; c < fp.class_frequency.size(); ++c)
    share_or_fail(fmt::format("class_frequency[{}]", c), fp.class_frequency[c]);
  share_or_fail("ignored_share", fp.ignored_share);
  if (fp.unlabelled_cases < 0 || fp.unlabelled_cases >= static_cast<int64_t>(fp.cases.size())) {
    fail("unlabelled_cases", fmt::format("{}, expected 0 .. {}", fp.unlabelled_cases, fp.cases.size() - 1));
  }
  if (fp.smallest_structure_voxels < 0 || fp.smallest_structure_voxels > total) {
    fail("smallest_structure_voxels", fmt::format("{}, expected 0 .. {}", fp.smallest_structure_voxels, total));
  }
}

}  // namespace u3d
