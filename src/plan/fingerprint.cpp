#include "u3d/plan/fingerprint.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/intensity_sample.h"
#include "u3d/core/json.h"
#include "u3d/core/parallel.h"
#include "u3d/core/run.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"

namespace u3d {
namespace {

// What one case contributes.
struct CaseSummary {
  CaseFingerprint info;
  std::vector<WeightedValues> samples;  // per channel (core/intensity_sample.h)
  std::vector<double> min, max;         // per channel, every voxel
  std::vector<bool> binary;             // per channel
  std::vector<int64_t> class_voxels;    // segmentation: per class
  bool has_target = false, has_mask = false;
  bool labelled = true;        // segmentation: the case has labels
  int64_t ignored_voxels = 0;  // segmentation: voxels holding the ignore label
  double target_min = 0, target_max = 0;
  int64_t mask_voxels = 0, voxels = 0;
};

// The per-channel part of a case's summary: the values at the voxels `idx` (the sample, each with
// `weight`) and the channel's min, max and 0/1-ness over every voxel. image: (C, V) float32.
CaseSummary finish_case(CaseSummary s, const torch::Tensor& image, const torch::Tensor& idx, double weight) {
  for (int64_t k = 0; k < image.size(0); ++k) {
    const torch::Tensor ch = image[k];
    const torch::Tensor v = ch.index_select(0, idx).to(torch::kFloat).contiguous();
    s.samples.push_back({{v.data_ptr<float>(), v.data_ptr<float>() + v.numel()}, weight});
    s.min.push_back(ch.min().item<double>());
    s.max.push_back(ch.max().item<double>());
    s.binary.push_back(((ch == 0) | (ch == 1)).all().item<bool>());
  }
  return s;
}

CaseSummary summarise_case(const DatasetReader& reader, const std::string& id, int64_t draws) {
  const DatasetInfo& info = reader.info();
  const CaseData c = reader.read_case(id);
  CaseSummary s;
  s.info.id = id;
  for (int a = 0; a < 3; ++a) s.info.shape[a] = c.image.size(a + 1);
  s.info.spacing = c.spacing;
  s.voxels = s.info.shape[0] * s.info.shape[1] * s.info.shape[2];
  const int64_t channels = c.image.size(0);
  const torch::Tensor image = c.image.reshape({channels, -1});  // (C, V) float32

  torch::Tensor fg;  // (V) bool
  if (info.task == Task::kSegmentation) {
    if (!c.target.defined()) {  // an unlabelled case (e.g. a test case): no foreground known, no sample
      s.labelled = false;
      return finish_case(std::move(s), image, torch::empty({0}, torch::kLong), 1.0);
    }
    // Labels are in [0, num_classes) or the ignore label: read_case checks them (DataError naming the case).
    const torch::Tensor labels = c.target.reshape({-1}).to(torch::kLong);
    const torch::Tensor ignored =
        info.ignore_label >= 0 ? labels == info.ignore_label : torch::zeros_like(labels, torch::kBool);
    s.ignored_voxels = ignored.sum().item<int64_t>();
    const torch::Tensor counts = torch::bincount(labels.masked_select(~ignored), {}, info.num_classes);
    s.class_voxels.assign(counts.data_ptr<int64_t>(), counts.data_ptr<int64_t>() + counts.numel());
    fg = (labels > 0) & ~ignored;
  } else {
    if (c.target.defined()) {
      s.has_target = true;
      s.target_min = c.target.min().item<double>();
      s.target_max = c.target.max().item<double>();
      fg = c.target.reshape({-1}) > 0;
    }
    s.mask_voxels = s.voxels;
    if (c.mask.defined()) {
      s.has_mask = true;
      const torch::Tensor m = c.mask.reshape({-1}) > 0;
      s.mask_voxels = m.sum().item<int64_t>();
      fg = fg.defined() ? (fg | m) : m;
    }
  }
  // nnU-Net's draw (core/intensity_sample.h) from the foreground; a case without any: every voxel.
  const int64_t n_fg = fg.defined() ? fg.sum().item<int64_t>() : 0;
  const torch::Tensor candidates = n_fg > 0 ? fg.nonzero().flatten() : torch::arange(s.voxels);
  const SamplePick pick = foreground_pick(candidates.size(0), draws, id);
  const torch::Tensor idx = candidates.index_select(0, torch::tensor(pick.positions, torch::kLong));
  return finish_case(std::move(s), image, idx, pick.weight);
}

double median(std::vector<double> v) { return percentile(std::move(v), 50.0); }

}  // namespace

DatasetFingerprint compute_fingerprint(const DatasetReader& reader, const std::vector<std::string>& ids,
                                       int64_t threads) {
  const DatasetInfo& info = reader.info();
  if (ids.empty()) throw DataError(fmt::format("{}: no cases to fingerprint", reader.path().string()));
  std::vector<CaseSummary> summaries(ids.size());
  parallel_for(static_cast<int64_t>(ids.size()), resolve_threads(threads), [&](int64_t i) {
    use_one_intra_op_thread();
    summaries[static_cast<size_t>(i)] = summarise_case(reader, ids[static_cast<size_t>(i)],
                                                       foreground_draws_per_case(static_cast<int64_t>(ids.size())));
  });

  DatasetFingerprint fp;
  fp.task = info.task;
  fp.channel_names = info.channel_names;
  fp.splits = split_counts(info, ids);
  const size_t channels = summaries.front().samples.size();
  std::vector<std::vector<WeightedValues>> pooled(channels);
  fp.channels.resize(channels);
  for (size_t k = 0; k < channels; ++k) {
    auto& ch = fp.channels[k];
    ch.name = k < info.channel_names.size() ? info.channel_names[k] : fmt::format("channel{}", k);
    ch.min = std::numeric_limits<double>::infinity();
    ch.max = -std::numeric_limits<double>::infinity();
    ch.binary = true;
  }
  int64_t mask_voxels = 0, labelled_voxels = 0, ignored_voxels = 0;
  bool any_mask = false, any_target = false;
  std::vector<int64_t> class_voxels(static_cast<size_t>(std::max<int64_t>(0, info.num_classes)), 0);
  fp.smallest_structure_voxels = 0;
  fp.target_min = std::numeric_limits<double>::infinity();
  fp.target_max = -std::numeric_limits<double>::infinity();
  for (const CaseSummary& s : summaries) {
    fp.cases.push_back(s.info);
    fp.total_voxels += s.voxels;
    for (size_t k = 0; k < channels; ++k) {
      if (!s.samples[k].values.empty()) pooled[k].push_back(s.samples[k]);
      auto& ch = fp.channels[k];
      ch.min = std::min(ch.min, s.min[k]);
      ch.max = std::max(ch.max, s.max[k]);
      ch.binary = ch.binary && s.binary[k];
    }
    for (size_t c = 0; c < s.class_voxels.size(); ++c) {
      class_voxels[c] += s.class_voxels[c];
      if (c > 0 && s.class_voxels[c] > 0 &&
          (fp.smallest_structure_voxels == 0 || s.class_voxels[c] < fp.smallest_structure_voxels)) {
        fp.smallest_structure_voxels = s.class_voxels[c];
      }
    }
    if (!s.labelled) ++fp.unlabelled_cases;
    if (s.labelled) labelled_voxels += s.voxels;
    ignored_voxels += s.ignored_voxels;
    mask_voxels += s.mask_voxels;
    any_mask = any_mask || s.has_mask;
    if (s.has_target) {
      any_target = true;
      fp.target_min = std::min(fp.target_min, s.target_min);
      fp.target_max = std::max(fp.target_max, s.target_max);
    }
  }
  for (size_t k = 0; k < channels; ++k) {
    auto& ch = fp.channels[k];
    const IntensityStats st = weighted_intensity_stats(pooled[k]);
    ch.samples = st.values;
    ch.mean = st.mean;
    ch.std = st.std;
    ch.p00_5 = st.p00_5;
    ch.p99_5 = st.p99_5;
  }
  if (info.task == Task::kSegmentation) {
    if (fp.unlabelled_cases == static_cast<int64_t>(summaries.size())) {
      throw DataError(
          fmt::format("{}: none of its {} cases has labels; a segmentation dataset needs labelled cases "
                      "to plan from",
                      reader.path().string(), summaries.size()));
    }
    fp.num_classes = info.num_classes;
    fp.class_names = info.class_names;
    fp.ignore_label = info.ignore_label;
    const int64_t scored = labelled_voxels - ignored_voxels;  // voxels holding a class
    for (int64_t n : class_voxels) {
      fp.class_frequency.push_back(scored > 0 ? static_cast<double>(n) / static_cast<double>(scored) : 0.0);
    }
    fp.ignored_share =
        labelled_voxels > 0 ? static_cast<double>(ignored_voxels) / static_cast<double>(labelled_voxels) : 0.0;
  }
  if (!any_target) fp.target_min = fp.target_max = 0;
  fp.mask_share =
      any_mask && fp.total_voxels > 0 ? static_cast<double>(mask_voxels) / static_cast<double>(fp.total_voxels) : 1.0;
  for (int a = 0; a < 3; ++a) {
    std::vector<double> shape, spacing;
    for (const auto& c : fp.cases) {
      shape.push_back(static_cast<double>(c.shape[a]));
      spacing.push_back(c.spacing[a]);
    }
    fp.median_shape[a] = std::llround(median(shape));
    fp.median_spacing[a] = median(spacing);
  }
  return fp;
}

std::string to_json(const DatasetFingerprint& fp) {
  Json cases = Json::array(), channels = Json::array(), splits = Json::object();
  for (const auto& [name, n] : fp.splits) splits[name] = n;
  for (const auto& cs : fp.cases) cases.push_back({{"id", cs.id}, {"shape", cs.shape}, {"spacing", cs.spacing}});
  for (const auto& ch : fp.channels) {
    channels.push_back({{"name", ch.name},
                        {"mean", ch.mean},
                        {"std", ch.std},
                        {"p00_5", ch.p00_5},
                        {"p99_5", ch.p99_5},
                        {"min", ch.min},
                        {"max", ch.max},
                        {"binary", ch.binary},
                        {"samples", ch.samples}});
  }
  const Json j = {{"version", fp.version},
                  {"source_size", fp.source_size},
                  {"source_mtime_ns", fp.source_mtime_ns},
                  {"task", to_string(fp.task)},
                  {"channel_names", fp.channel_names},
                  {"splits", splits},
                  {"cases", cases},
                  {"channels", channels},
                  {"num_classes", fp.num_classes},
                  {"class_names", fp.class_names},
                  {"class_frequency", fp.class_frequency},
                  {"ignore_label", fp.ignore_label},
                  {"ignored_share", fp.ignored_share},
                  {"unlabelled_cases", fp.unlabelled_cases},
                  {"smallest_structure_voxels", fp.smallest_structure_voxels},
                  {"target_min", fp.target_min},
                  {"target_max", fp.target_max},
                  {"mask_share", fp.mask_share},
                  {"median_shape", fp.median_shape},
                  {"median_spacing", fp.median_spacing},
                  {"total_voxels", fp.total_voxels}};
  return json_file_text(j);
}

DatasetFingerprint fingerprint_from_json(const std::string& json, const std::string& source) {
  const Json n = parse_json(json, source);
  DatasetFingerprint fp;
  auto num = [](const Json& v) { return v.is_null() ? std::nan("") : v.get<double>(); };  // NaN is written null
  try {
    fp.version = n.at("version").get<int64_t>();
    if (fp.version != kFingerprintVersion) {
      throw DataError(fmt::format("{}: fingerprint version {}, this trainer reads version {}", source, fp.version,
                                  kFingerprintVersion));
    }
    fp.source_size = n.at("source_size").get<int64_t>();
    fp.source_mtime_ns = n.at("source_mtime_ns").get<int64_t>();
    fp.task = task_from_string(n.at("task").get<std::string>());
    fp.channel_names = n.at("channel_names").get<std::vector<std::string>>();
    fp.splits = n.at("splits").get<std::map<std::string, int64_t>>();
    for (const auto& c : n.at("cases")) {
      fp.cases.push_back(
          {c.at("id").get<std::string>(), c.at("shape").get<Shape3>(), c.at("spacing").get<std::array<double, 3>>()});
    }
    for (const auto& c : n.at("channels")) {
      ChannelFingerprint ch;
      ch.name = c.at("name").get<std::string>();
      ch.mean = num(c.at("mean"));
      ch.std = num(c.at("std"));
      ch.p00_5 = num(c.at("p00_5"));
      ch.p99_5 = num(c.at("p99_5"));
      ch.min = num(c.at("min"));
      ch.max = num(c.at("max"));
      ch.binary = c.at("binary").get<bool>();
      ch.samples = c.at("samples").get<int64_t>();
      fp.channels.push_back(ch);
    }
    fp.num_classes = n.at("num_classes").get<int64_t>();
    fp.class_names = n.at("class_names").get<std::vector<std::string>>();
    fp.class_frequency = n.at("class_frequency").get<std::vector<double>>();
    fp.ignore_label = n.at("ignore_label").get<int64_t>();
    fp.ignored_share = num(n.at("ignored_share"));
    fp.unlabelled_cases = n.at("unlabelled_cases").get<int64_t>();
    fp.smallest_structure_voxels = n.at("smallest_structure_voxels").get<int64_t>();
    fp.target_min = num(n.at("target_min"));
    fp.target_max = num(n.at("target_max"));
    fp.mask_share = num(n.at("mask_share"));
    fp.median_shape = n.at("median_shape").get<Shape3>();
    fp.median_spacing = n.at("median_spacing").get<std::array<double, 3>>();
    fp.total_voxels = n.at("total_voxels").get<int64_t>();
  } catch (const Json::exception& e) {
    throw DataError(fmt::format("{}: not a dataset fingerprint ({})", source, e.what()));
  }
  return fp;
}

std::map<std::string, int64_t> split_counts(const DatasetInfo& info, const std::vector<std::string>& ids) {
  const std::set<std::string> chosen(ids.begin(), ids.end());
  std::map<std::string, int64_t> out;
  for (const auto& [name, split_ids] : info.splits) {
    const auto n = std::count_if(split_ids.begin(), split_ids.end(), [&](const auto& id) { return chosen.count(id); });
    if (n > 0) out[name] = static_cast<int64_t>(n);
  }
  return out;
}

std::vector<std::string> planning_case_ids(const DatasetReader& reader) {
  const auto& all = reader.info().case_ids;
  if (!reader.has_split("test")) return all;
  const auto& test = reader.split("test");
  const std::set<std::string> held_out(test.begin(), test.end());
  std::vector<std::string> ids;
  for (const auto& id : all) {
    if (!held_out.count(id)) ids.push_back(id);
  }
  if (ids.empty()) {
    throw DataError(
        fmt::format("{}: every case is in the split 'test'; a plan looks only at the cases a model "
                    "trains and validates on",
                    reader.path().string()));
  }
  return ids;
}

fs::path fingerprint_path(const fs::path& dataset) { return fs::path(dataset.string() + ".fingerprint.json"); }

DatasetFingerprint load_or_compute_fingerprint(const fs::path& dataset, const DatasetReader& reader, int64_t threads,
                                               bool* computed) {
  const fs::path stored = fingerprint_path(dataset);
  std::error_code ec;
  const int64_t size = static_cast<int64_t>(fs::file_size(dataset, ec));
  if (ec) throw IoError(fmt::format("{}: cannot read its size ({})", dataset.string(), ec.message()));
  // Unix time in ns from stat(2): std::filesystem's file_clock has another epoch in libstdc++.
  struct stat st {};
  if (::stat(dataset.c_str(), &st) != 0) {
    throw IoError(fmt::format("{}: cannot read its modification time ({})", dataset.string(), std::strerror(errno)));
  }
  const int64_t mtime = static_cast<int64_t>(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
  if (computed) *computed = false;
  if (fs::exists(stored, ec)) {
    try {
      DatasetFingerprint fp = fingerprint_from_json(read_file(stored), stored.string());
      if (fp.source_size == size && fp.source_mtime_ns == mtime) {
        check_fingerprint(fp, reader, stored.string());
        return fp;
      }
      spdlog::info("{}: stale (the dataset changed since it was made); recomputing", stored.string());
    } catch (const Error& e) {
      spdlog::warn("{}; recomputing", e.what());
    }
  }
  DatasetFingerprint fp = compute_fingerprint(reader, planning_case_ids(reader), threads);
  fp.source_size = size;
  fp.source_mtime_ns = mtime;
  if (computed) *computed = true;
  try {
    write_file_atomic(stored, to_json(fp));
  } catch (const std::exception& e) {
    spdlog::warn("dataset fingerprint not stored: {}", error_line(e));
  }
  return fp;
}

std::string fingerprint_table(const DatasetFingerprint& fp) {
  std::ostringstream out;
  Shape3 lo = fp.cases.front().shape, hi = lo;
  std::array<double, 3> slo = fp.cases.front().spacing, shi = slo;
  for (const auto& c : fp.cases) {
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], c.shape[a]);
      hi[a] = std::max(hi[a], c.shape[a]);
      slo[a] = std::min(slo[a], c.spacing[a]);
      shi[a] = std::max(shi[a], c.spacing[a]);
    }
  }
  std::string splits;
  for (const auto& [name, n] : fp.splits) splits += fmt::format("{}{} {}", splits.empty() ? "" : ", ", name, n);
  out << fmt::format("  task            {}\n", to_string(fp.task));
  out << fmt::format("  cases           {}{}\n", fp.cases.size(), splits.empty() ? "" : " (" + splits + ")");
  out << fmt::format("  median shape    {} x {} x {} (D x H x W; range {}..{} x {}..{} x {}..{})\n", fp.median_shape[0],
                     fp.median_shape[1], fp.median_shape[2], lo[0], hi[0], lo[1], hi[1], lo[2], hi[2]);
  out << fmt::format(
      "  spacing         median {:.4g} x {:.4g} x {:.4g} mm (range {:.4g}..{:.4g} x {:.4g}..{:.4g} x "
      "{:.4g}..{:.4g})\n",
      fp.median_spacing[0], fp.median_spacing[1], fp.median_spacing[2], slo[0], shi[0], slo[1], shi[1], slo[2], shi[2]);
  out << fmt::format("  voxels          {:.4g} in all\n", static_cast<double>(fp.total_voxels));
  out << fmt::format("  {:<16}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}\n", "channel", "mean", "std", "p0.5", "p99.5", "min",
                     "max");
  for (const auto& ch : fp.channels) {
    out << fmt::format("  {:<16}{:>11.4g}{:>11.4g}{:>11.4g}{:>11.4g}{:>11.4g}{:>11.4g}{}\n", ch.name, ch.mean, ch.std,
                       ch.p00_5, ch.p99_5, ch.min, ch.max, ch.binary ? "  (0/1 mask)" : "");
  }
  if (fp.task == Task::kSegmentation) {
    out << fmt::format("  classes         {}\n", fp.num_classes);
    for (size_t c = 0; c < fp.class_frequency.size(); ++c) {
      out << fmt::format("    {:<14}{:.4g}% of voxels\n",
                         c < fp.class_names.size() ? fp.class_names[c] : fmt::format("class {}", c),
                         100.0 * fp.class_frequency[c]);
    }
    out << fmt::format("  smallest structure {} voxels\n", fp.smallest_structure_voxels);
    if (fp.ignore_label >= 0) {
      out << fmt::format("  ignore label    {}: {:.4g}% of the labelled cases' voxels (not a class)\n", fp.ignore_label,
                         100.0 * fp.ignored_share);
    }
    if (fp.unlabelled_cases > 0) {
      out << fmt::format("  unlabelled      {} cases (shapes and spacings only)\n", fp.unlabelled_cases);
    }
  } else {
    out << fmt::format("  target range    {:.4g} .. {:.4g}\n", fp.target_min, fp.target_max);
    out << fmt::format("  loss mask       {:.4g}% of voxels\n", 100.0 * fp.mask_share);
  }
  return out.str();
}

}  // namespace u3d
