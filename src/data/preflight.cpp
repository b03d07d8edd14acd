#include "u3d/data/preflight.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <map>
#include <mutex>
#include <thread>

#include "u3d/core/errors.h"
#include "u3d/core/finite.h"
#include "u3d/core/input_limits.h"
#include "u3d/core/parallel.h"
#include "u3d/core/text.h"
#include "u3d/data/input_check.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/h5/h5.h"

namespace u3d {
namespace {

DataProblem problem(DataProblem::Severity s, std::string id, std::string field, std::string message) {
  return DataProblem{s, std::move(id), std::move(field), std::move(message)};
}
DataProblem error(const std::string& id, const std::string& field, std::string message) {
  return problem(DataProblem::Severity::kError, id, field, std::move(message));
}
DataProblem warning(const std::string& id, const std::string& field, std::string message) {
  return problem(DataProblem::Severity::kWarning, id, field, std::move(message));
}

// Where the first non-finite voxel of `t` is, as "(c, z, y, x)" in the tensor's own index order.
std::string first_non_finite(const torch::Tensor& t) {
  const torch::Tensor bad = torch::logical_not(torch::isfinite(t));
  int64_t flat = bad.flatten().to(torch::kByte).argmax().item<int64_t>();
  std::vector<int64_t> idx(static_cast<size_t>(bad.dim()));
  for (int64_t d = bad.dim() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = flat % bad.size(d);
    flat /= bad.size(d);
  }
  return fmt::format("({})", fmt::join(idx, ", "));
}

void report_non_finite(const torch::Tensor& t, const std::string& id, const std::string& field,
                       std::vector<DataProblem>& out) {
  const int64_t n = non_finite_count(t);
  if (n > 0) {
    out.push_back(error(
        id, field,
        fmt::format("holds {} NaN or Inf voxel{} (first at index {})", n, n == 1 ? "" : "s", first_non_finite(t))));
  }
}

std::string strip_prefix(const std::string& message, const std::filesystem::path& file) {
  const std::string prefix = file.string() + ": ";
  return message.rfind(prefix, 0) == 0 ? message.substr(prefix.size()) : message;
}

// What the checks of one case found, and its spacing for the dataset-level comparison.
struct CaseCheck {
  std::vector<DataProblem> problems;
  std::array<double, 3> spacing = {1, 1, 1};
  bool has_spacing = false;
};

// One case read field by field, so one broken field does not hide the others; `read_out` (when
// given) receives the fields that could be read.
CaseCheck inspect_case(hid_t file, const DatasetInfo& info, const std::string& id, CaseData* read_out = nullptr) {
  CaseCheck result;
  std::vector<DataProblem>& out = result.problems;
  const std::string base = "cases/" + id;
  const std::string ctx = fmt::format("case '{}'", id);
  if (!h5::exists(file, base)) {
    out.push_back(error(id, "", "is not in the file"));
    return result;
  }
  CaseData c;
  c.id = id;
  // Reads `field` as `dtype`, or records why it cannot be read; also its own spacing attribute.
  std::map<std::string, std::vector<double>> field_spacing;
  auto read = [&](const std::string& field, torch::ScalarType dtype, bool required) -> torch::Tensor {
    const std::string path = base + "/" + field;
    if (!h5::exists(file, path)) {
      if (required) out.push_back(error(id, field, "is missing"));
      return {};
    }
    try {
      h5::Handle d = h5::open_dataset(file, path, ctx);
      if (const std::string problem = h5::declared_size_problem(h5::dataset_shape(d.get(), ctx), dtype);
          !problem.empty()) {
        out.push_back(error(id, field, problem));  // before anything is allocated
        return {};
      }
      if (h5::has_attribute(d.get(), "spacing")) {
        field_spacing[field] = h5::read_double_list_attribute(d.get(), "spacing", ctx);
      }
      if (field == "target" && info.task == Task::kSegmentation &&
          c10::isFloatingType(h5::stored_dtype(d.get(), ctx))) {
        torch::Tensor t = h5::read_tensor(file, path, torch::kDouble, ctx);
        if (!torch::isfinite(t).all().item<bool>() || !torch::equal(t, t.round())) {
          out.push_back(error(id, field, "holds label values that are not integers"));
          return {};
        }
        return t.to(dtype);
      }
      return h5::read_tensor(file, path, dtype, ctx);
    } catch (const Error&) {
      out.push_back(error(id, field, "cannot be read (truncated or corrupt HDF5 data)"));
      return {};
    }
  };
  c.image = read("image", torch::kFloat, /*required=*/true);
  c.target = read("target", info.task == Task::kSegmentation ? torch::kLong : torch::kFloat, false);
  c.mask = read("mask", torch::kFloat, false);
  bool has_spacing = false;
  try {
    h5::Handle group = h5::open_group(file, base, ctx);
    if (h5::has_attribute(group.get(), "spacing")) {
      const auto s = h5::read_double_list_attribute(group.get(), "spacing", ctx);
      if (s.size() != 3 || !std::all_of(s.begin(), s.end(), [](double v) { return std::isfinite(v) && v > 0; })) {
        out.push_back(
            error(id, "spacing",
                  fmt::format("should be three positive numbers (mm along D, H, W), is [{}]", fmt::join(s, ", "))));
      } else {
        c.spacing = {s[0], s[1], s[2]};
        has_spacing = true;
      }
    } else {
      out.push_back(warning(id, "spacing", "attribute is missing; 1 mm voxels assumed"));
    }
  } catch (const Error&) {
    out.push_back(error(id, "spacing", "cannot be read"));
  }
  for (const auto& [field, s] : field_spacing) {
    const bool same = s.size() == 3 && std::equal(s.begin(), s.end(), c.spacing.begin(),
                                                  [](double a, double b) { return std::abs(a - b) <= 1e-3 * b; });
    if (!same) {
      out.push_back(error(id, field,
                          fmt::format("spacing mismatch: the field says [{}] mm, the case [{}] mm", fmt::join(s, ", "),
                                      fmt::join(c.spacing, ", "))));
    }
  }
  auto content = check_case_content(c, info);
  out.insert(out.end(), content.begin(), content.end());
  result.spacing = c.spacing;
  result.has_spacing = has_spacing;
  if (read_out) *read_out = std::move(c);
  return result;
}

// A spacing far from the dataset's median: usually a case that was not resampled. Adds a warning
// to each such case (with at least three cases that record a spacing).
void add_spacing_warnings(const std::vector<std::string>& ids, std::vector<CaseCheck>& checks) {
  std::array<std::vector<double>, 3> axes;
  for (const auto& c : checks) {
    if (!c.has_spacing) continue;
    for (size_t a = 0; a < 3; ++a) axes[a].push_back(c.spacing[a]);
  }
  if (axes[0].size() < 3) return;
  std::array<double, 3> median{};
  for (size_t a = 0; a < 3; ++a) {
    auto v = axes[a];
    std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
    median[a] = v[v.size() / 2];
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    CaseCheck& c = checks[i];
    if (!c.has_spacing) continue;
    for (size_t a = 0; a < 3; ++a) {
      const double ratio = c.spacing[a] / median[a];
      if (ratio > 2.0 || ratio < 0.5) {
        c.problems.push_back(warning(ids[i], "spacing",
                                     fmt::format("[{}] mm is more than 2x off the dataset's "
                                                 "median [{}] mm; resample the case?",
                                                 fmt::join(c.spacing, ", "), fmt::join(median, ", "))));
        break;
      }
    }
  }
}

CaseCheck checked_inspect(hid_t file, const DatasetInfo& info, const std::string& id, CaseData* read_out = nullptr) {
  try {
    return inspect_case(file, info, id, read_out);
  } catch (const std::exception& e) {  // anything unexpected still names the case
    CaseCheck c;
    // An allocation that failed: in our words, never the allocator's "enforce fail" text.
    const std::string why = host_allocation_failure(e) ? "out of host memory while reading it" : error_line(e);
    c.problems.push_back(error(id, "", fmt::format("cannot be checked: {}", why)));
    return c;
  }
}

}  // namespace

int64_t DataReport::errors() const {
  return std::count_if(problems.begin(), problems.end(), [](const DataProblem& p) { return p.is_error(); });
}

int64_t DataReport::warnings() const { return static_cast<int64_t>(problems.size()) - errors(); }

std::set<std::string> DataReport::bad_cases() const {
  std::set<std::string> out;
  for (const auto& p : problems) {
    if (p.is_error() && !p.case_id.empty()) out.insert(p.case_id);
  }
  return out;
}

bool DataReport::file_unusable() const {
  return std::any_of(problems.begin(), problems.end(),
                     [](const DataProblem& p) { return p.is_error() && p.case_id.empty(); });
}

std::string DataReport::describe(const DataProblem& p) const {
  std::string out = file.string();
  if (!p.case_id.empty()) out += fmt::format(": case '{}'", p.case_id);
  if (!p.field.empty()) out += fmt::format(": '{}'", p.field);
  return out + ": " + p.message;
}

std::vector<DataProblem> check_case_content(const CaseData& c, const DatasetInfo& info) {
  std::vector<DataProblem> out;
  const std::string& id = c.id;
  std::vector<int64_t> spatial;
  if (c.image.defined()) {
    if (c.image.dim() != 4) {
      out.push_back(error(id, "image", fmt::format("should be (C, D, H, W), is {}", shape_text(c.image.sizes()))));
    } else {
      spatial = c.image.sizes().slice(1).vec();
      if (c.image.numel() == 0) {
        out.push_back(error(id, "image",
                            fmt::format("is empty: shape {} holds no voxels (every axis needs at least "
                                        "one)",
                                        shape_text(c.image.sizes()))));
      }
      if (c.image.size(0) != static_cast<int64_t>(info.channel_names.size())) {
        out.push_back(
            error(id, "image",
                  fmt::format("has {} channels; channel_names lists {}", c.image.size(0), info.channel_names.size())));
      }
      report_non_finite(c.image, id, "image", out);
    }
  }
  if (c.target.defined()) {
    if (!spatial.empty() && c.target.sizes().vec() != spatial) {
      out.push_back(error(id, "target",
                          fmt::format("shape mismatch: target is {} but the image is {} spatially",
                                      shape_text(c.target.sizes()), shape_text(spatial))));
    }
    if (info.task == Task::kSegmentation) {
      const torch::Tensor labels = c.target.to(torch::kLong);
      // The dataset's ignore label (above the classes) is a declared value, not a class.
      torch::Tensor outside = (labels < 0) | (labels >= info.num_classes);
      if (info.ignore_label >= 0) outside &= labels != info.ignore_label;
      if (outside.any().item<bool>()) {
        const auto values = std::get<0>(torch::_unique(labels.masked_select(outside)));
        std::vector<int64_t> v(values.data_ptr<int64_t>(),
                               values.data_ptr<int64_t>() + std::min<int64_t>(8, values.numel()));
        out.push_back(error(id, "target",
                            fmt::format("label values {{{}}} are outside the declared classes 0..{} "
                                        "(num_classes = {})",
                                        fmt::join(v, ", "), info.num_classes - 1, info.num_classes)));
      } else if (labels.numel() > 0 &&
                 (info.ignore_label >= 0 ? labels.masked_fill(labels == info.ignore_label, 0) : labels)
                         .max()
                         .item<int64_t>() == 0) {
        out.push_back(warning(id, "target", "is empty (background only); patches of this case teach only background"));
      }
    } else {
      report_non_finite(c.target, id, "target", out);
      const torch::Tensor finite = c.target.masked_select(torch::isfinite(c.target));
      if (finite.numel() > 0) {
        const double lo = finite.min().item<double>();
        const double hi = finite.max().item<double>();
        if (hi == 0 && lo == 0) {
          out.push_back(warning(id, "target", "is empty (all zero)"));
        } else if (lo < 0) {
          out.push_back(warning(id, "target", fmt::format("holds negative values (min {:.4g})", lo)));
        }
      }
    }
  }
  if (c.mask.defined()) {
    if (!spatial.empty() && c.mask.sizes().vec() != spatial) {
      out.push_back(error(id, "mask",
                          fmt::format("shape mismatch: mask is {} but the image is {} spatially",
                                      shape_text(c.mask.sizes()), shape_text(spatial))));
    }
    const torch::Tensor m = c.mask.to(torch::kFloat);
    if (!((m == 0) | (m == 1)).all().item<bool>()) {
      out.push_back(warning(id, "mask", "holds values other than 0 and 1 (read as uint8: nonzero counts as inside)"));
    }
    if (!(m != 0).any().item<bool>()) {
      out.push_back(warning(id, "mask", "is empty (all zero): the case adds nothing to a masked loss or metric"));
    }
  }
  if (!std::all_of(c.spacing.begin(), c.spacing.end(), [](double v) { return std::isfinite(v) && v > 0; })) {
    out.push_back(
        error(id, "spacing", fmt::format("should be three positive numbers, is [{}]", fmt::join(c.spacing, ", "))));
  }
  return out;
}

DataReport check_dataset(const std::filesystem::path& path, const std::vector<std::string>& ids_in, int64_t threads) {
  DataReport report;
  report.file = path;
  std::unique_ptr<DatasetReader> reader;
  try {
    reader = std::make_unique<DatasetReader>(path);
  } catch (const Error& e) {
    report.problems.push_back(error("", "", strip_prefix(e.what(), path)));
    return report;
  }
  const DatasetInfo& info = reader->info();
  const std::vector<std::string>& ids = ids_in.empty() ? info.case_ids : ids_in;
  h5::Handle file(H5Fopen(path.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose);
  if (!file.valid()) {
    report.problems.push_back(error("", "", "cannot open HDF5 file (truncated or corrupt?)"));
    return report;
  }
  std::vector<CaseCheck> checks(ids.size());
  parallel_for(static_cast<int64_t>(ids.size()), threads, [&](int64_t k) {
    checks[static_cast<size_t>(k)] = checked_inspect(file.get(), info, ids[static_cast<size_t>(k)]);
  });
  report.cases_checked = static_cast<int64_t>(ids.size());
  add_spacing_warnings(ids, checks);
  for (auto& c : checks) report.problems.insert(report.problems.end(), c.problems.begin(), c.problems.end());
  return report;
}

// ---------------------------------------------------------------------------------------------
struct CheckedReader::Impl {
  const DatasetReader& reader;
  h5::Handle file;
  std::mutex mutex;
  std::map<std::string, CaseCheck> seen;  // by case id
  const Preprocessor* pre = nullptr;      // check_inputs()
  std::unique_ptr<InputRangeCheck> inputs;
};

CheckedReader::CheckedReader(const DatasetReader& reader)
    : impl_(new Impl{reader,
                     h5::Handle(H5Fopen(reader.path().c_str(), H5F_ACC_RDONLY, H5P_DEFAULT), H5Fclose),
                     {},
                     {},
                     nullptr,
                     nullptr}) {
  if (!impl_->file.valid()) throw IoError(fmt::format("{}: cannot open HDF5 file", reader.path().string()));
}

CheckedReader::~CheckedReader() = default;

void CheckedReader::check_inputs(const Preprocessor& pre, const std::vector<std::string>& specs) {
  impl_->pre = &pre;
  impl_->inputs = std::make_unique<InputRangeCheck>(pre.channel_names(), specs);
}

CaseData CheckedReader::read(const std::string& id) {
  CaseData c;
  CaseCheck check = checked_inspect(impl_->file.get(), impl_->reader.info(), id, &c);
  const bool bad =
      std::any_of(check.problems.begin(), check.problems.end(), [](const auto& p) { return p.is_error(); });
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    impl_->seen[id] = std::move(check);
  }
  if (bad) throw DataError(fmt::format("{}: case '{}' failed its checks", impl_->reader.path().string(), id));
  if (impl_->inputs && c.image.defined()) impl_->inputs->add(impl_->pre->image(c.image));
  // DatasetReader::read_case's form: labels and masks as uint8.
  if (c.target.defined() && impl_->reader.info().task == Task::kSegmentation) c.target = c.target.to(torch::kUInt8);
  if (c.mask.defined()) c.mask = c.mask.to(torch::kUInt8);
  return c;
}

void CheckedReader::check_rest(const std::vector<std::string>& ids, int64_t threads) {
  std::vector<std::string> rest;
  {
    std::lock_guard<std::mutex> lock(impl_->mutex);
    for (const auto& id : ids) {
      if (!impl_->seen.count(id)) rest.push_back(id);
    }
  }
  std::vector<CaseCheck> checks(rest.size());
  parallel_for(static_cast<int64_t>(rest.size()), threads, [&](int64_t k) {
    checks[static_cast<size_t>(k)] =
        checked_inspect(impl_->file.get(), impl_->reader.info(), rest[static_cast<size_t>(k)]);
  });
  std::lock_guard<std::mutex> lock(impl_->mutex);
  for (size_t i = 0; i < rest.size(); ++i) impl_->seen[rest[i]] = std::move(checks[i]);
}

DataReport CheckedReader::report() const {
  std::lock_guard<std::mutex> lock(impl_->mutex);
  DataReport report;
  report.file = impl_->reader.path();
  std::vector<std::string> ids;
  std::vector<CaseCheck> checks;
  for (const auto& [id, check] : impl_->seen) {
    ids.push_back(id);
    checks.push_back(check);
  }
  report.cases_checked = static_cast<int64_t>(ids.size());
  add_spacing_warnings(ids, checks);
  for (auto& c : checks) report.problems.insert(report.problems.end(), c.problems.begin(), c.problems.end());
  if (impl_->inputs) {
    const auto inputs = impl_->inputs->warnings();
    report.problems.insert(report.problems.begin(), inputs.begin(), inputs.end());  // file-level first
  }
  return report;
}

void log_report(const DataReport& report, const std::string& what) {
  for (const auto& p : report.problems) {
    if (p.is_error()) {
      spdlog::error("{}: {}", what, report.describe(p));
    } else {
      spdlog::warn("{}: {}", what, report.describe(p));
    }
  }
  spdlog::info("{}: {} cases of {} read in full: {} error(s) in {} case(s), {} warning(s)", what, report.cases_checked,
               report.file.string(), report.errors(), report.bad_cases().size(), report.warnings());
}

}  // namespace u3d
