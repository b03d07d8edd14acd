// The two NIfTI layouts an import reads (nnU-Net raw datasets and plain folders), the label checks,
// the val selection and the importers' one end (progress, splits).
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <set>

#include "import_layout.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/rng.h"
#include "u3d/core/sha256.h"
#include "u3d/core/text.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace import_detail {
namespace {

std::vector<fs::path> nifti_files_in(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(fmt::format("{}: folder not found", dir.string()));
  std::vector<fs::path> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (e.is_regular_file() && is_nifti_path(e.path()) && e.path().filename().string()[0] != '.')
      out.push_back(e.path());
  }
  std::sort(out.begin(), out.end());
  return out;
}

// A JSON value that is a whole integer: a number, or a string holding one ("1" but not "1a" or "").
std::optional<int64_t> json_int(const Json& v) {
  if (v.is_number_integer()) return v.get<int64_t>();
  if (v.is_string()) return parse_int(v.get<std::string>());
  return std::nullopt;
}

// A JSON scalar as text: a string's characters, a number as written.
std::string scalar_text(const Json& v) { return v.is_string() ? v.get<std::string>() : v.dump(); }

}  // namespace

Layout nnunet_layout(const fs::path& source) {
  const fs::path json = source / "dataset.json";
  std::error_code ec;
  if (!fs::is_directory(source, ec)) throw DataError(fmt::format("{}: folder not found", source.string()));
  if (!fs::exists(json, ec)) {
    throw DataError(
        fmt::format("{}: missing; an nnU-Net raw dataset holds dataset.json, imagesTr/ and labelsTr/", json.string()));
  }
  const Json root = parse_json(read_file(json), json.string());
  if (!root.is_object()) throw DataError(fmt::format("{}: expected a JSON object", json.string()));
  Layout layout;
  DatasetInfo& info = layout.info;
  info.task = Task::kSegmentation;
  info.target_name = "labels";
  info.description = fmt::format("imported from nnU-Net raw dataset {}", fs::absolute(source).filename().string());

  const Json channels = root.contains("channel_names") ? root["channel_names"] : root.value("modality", Json());
  if (!channels.is_object() || channels.empty()) {
    throw DataError(fmt::format("{}: 'channel_names' must map \"0\", \"1\", ... to channel names", json.string()));
  }
  std::map<int64_t, std::string> by_index;
  for (const auto& [key, name] : channels.items()) {
    const auto i = parse_int(key);
    if (!i || *i < 0 || !name.is_primitive() || name.is_null()) {
      throw DataError(fmt::format("{}: channel_names: '{}' is not a channel number", json.string(), key));
    }
    by_index[*i] = scalar_text(name);
  }
  for (const auto& [i, name] : by_index) {
    if (i != static_cast<int64_t>(info.channel_names.size())) {
      throw DataError(fmt::format("{}: channel_names must be numbered 0, 1, ... without gaps", json.string()));
    }
    info.channel_names.push_back(name);
  }

  const Json labels = root.value("labels", Json());
  if (!labels.is_object()) {
    throw DataError(fmt::format("{}: 'labels' must map label names to values", json.string()));
  }
  std::map<int64_t, std::string> classes;
  for (const auto& [key, value] : labels.items()) {
    if (value.is_array()) {
      throw DataError(
          fmt::format("{}: label '{}' is a region (a list of values); region-based training is not "
                      "supported",
                      json.string(), key));
    }
    if (const auto v = json_int(value)) {
      classes[*v] = key;  // v2: "liver": 1
    } else if (const auto k = parse_int(key); k && value.is_primitive() && !value.is_null()) {
      classes[*k] = scalar_text(value);  // v1 (MSD): "1": "liver"
    } else {
      throw DataError(fmt::format("{}: labels: '{}' has no integer value", json.string(), key));
    }
  }
  // nnU-Net's ignore label: the entry named "ignore", the highest value; unlabeled voxels, not a class.
  const auto ignore =
      std::find_if(classes.begin(), classes.end(), [](const auto& kv) { return kv.second == "ignore"; });
  if (ignore != classes.end()) {
    if (std::next(ignore) != classes.end() || ignore->first > 255) {
      throw DataError(fmt::format("{}: labels: \"ignore\" = {} must be the highest label value, at most 255",
                                  json.string(), ignore->first));
    }
    info.ignore_label = ignore->first;
    layout.declared.insert(ignore->first);
    classes.erase(ignore);
  }
  for (const auto& [v, name] : classes) {
    if (v != static_cast<int64_t>(info.class_names.size())) {
      throw DataError(
          fmt::format("{}: labels must be 0, 1, ..., K-1 without gaps (0 = background); found {}", json.string(), v));
    }
    info.class_names.push_back(name);
    layout.declared.insert(v);
  }
  info.num_classes = static_cast<int64_t>(info.class_names.size());
  if (info.num_classes < 2 || info.num_classes > 256) {
    throw DataError(
        fmt::format("{}: {} labels declared; need background and 1 to 255 classes", json.string(), info.num_classes));
  }
  const std::string ending = root.contains("file_ending") ? scalar_text(root["file_ending"]) : ".nii.gz";
  if (ending != ".nii.gz" && ending != ".nii") {
    throw DataError(
        fmt::format("{}: file_ending '{}' is not NIfTI; this importer reads .nii.gz and .nii", json.string(), ending));
  }
  auto channel_files = [&](const fs::path& dir, const std::string& id) {
    std::vector<fs::path> files;
    for (size_t c = 0; c < info.channel_names.size(); ++c) {
      const fs::path p = dir / fmt::format("{}_{:04d}{}", id, c, ending);
      if (!fs::exists(p, ec)) {
        throw DataError(fmt::format("{}: missing; case '{}' needs one file per channel ({} channels in dataset.json)",
                                    p.string(), id, info.channel_names.size()));
      }
      files.push_back(p);
    }
    return files;
  };
  auto case_id = [&](const fs::path& file, const std::string& suffix) {
    const std::string name = file.filename().string();
    if (!ends_with(name, suffix)) return std::string();
    std::string id = name.substr(0, name.size() - suffix.size());
    if (!is_valid_case_id(id)) {
      throw DataError(
          fmt::format("{}: case id '{}' may hold only letters, digits, '_', '-' and '.'", file.string(), id));
    }
    return id;
  };
  for (const auto& f : nifti_files_in(source / "labelsTr")) {
    const std::string id = case_id(f, ending);
    if (id.empty()) continue;
    layout.labelled.push_back({id, channel_files(source / "imagesTr", id), f});
  }
  if (layout.labelled.empty()) {
    throw DataError(fmt::format("{}: no label files ending in {}", (source / "labelsTr").string(), ending));
  }
  if (root.contains("numTraining")) {
    const int64_t declared = json_int(root["numTraining"]).value_or(-1);
    if (declared != static_cast<int64_t>(layout.labelled.size())) {
      spdlog::warn("import: dataset.json says numTraining = {}, labelsTr holds {} cases", declared,
                   layout.labelled.size());
    }
  }
  if (fs::is_directory(source / "imagesTs", ec)) {
    for (const auto& f : nifti_files_in(source / "imagesTs")) {
      const std::string id = case_id(f, "_0000" + ending);
      if (id.empty()) continue;
      layout.unlabelled.push_back({id, channel_files(source / "imagesTs", id), std::nullopt});
    }
  }
  return layout;
}

Layout nifti_folders_layout(const NiftiFolders& folders) {
  Layout layout;
  DatasetInfo& info = layout.info;
  info.task = Task::kSegmentation;
  info.target_name = "labels";
  info.description = fmt::format("imported from NIfTI folder {}", fs::absolute(folders.images).string());
  const auto& suffixes = folders.channel_suffixes;
  const size_t channels = std::max<size_t>(1, suffixes.size());
  if (!folders.channel_names.empty() && folders.channel_names.size() != channels) {
    throw UsageError(fmt::format("--channel-names: {} names for {} channels", folders.channel_names.size(), channels));
  }
  for (size_t c = 0; c < channels; ++c) {
    info.channel_names.push_back(!folders.channel_names.empty() ? folders.channel_names[c]
                                 : channels == 1                ? std::string("image")
                                                                : fmt::format("channel_{}", c));
  }
  if (!folders.class_names.empty()) {
    if (folders.class_names.size() < 2 || folders.class_names.size() > 256) {
      throw UsageError("--classes: give 2 to 256 names, background first");
    }
    info.class_names = folders.class_names;
    info.num_classes = static_cast<int64_t>(info.class_names.size());
    for (int64_t k = 0; k < info.num_classes; ++k) layout.declared.insert(k);
  } else if (folders.labels.empty()) {
    throw UsageError("--classes is required without --labels (the classes the model predicts, background first)");
  } else {
    info.num_classes = 2;  // provisional; found from the labels
    info.class_names = {"background", "class_1"};
  }
  std::error_code ec;
  for (const auto& f : nifti_files_in(folders.images)) {
    const std::string name = f.filename().string();
    const std::string ending = ends_with(name, ".nii.gz") ? ".nii.gz" : ".nii";
    const std::string stem = name.substr(0, name.size() - ending.size());
    CaseFiles cf;
    if (suffixes.empty()) {
      cf.id = stem;
      cf.channels = {f};
    } else {
      if (!ends_with(stem, suffixes[0])) continue;  // another channel's file
      cf.id = stem.substr(0, stem.size() - suffixes[0].size());
      for (const auto& s : suffixes) {
        const fs::path p = folders.images / (cf.id + s + ending);
        if (!fs::exists(p, ec))
          throw DataError(fmt::format("{}: missing channel file of case '{}'", p.string(), cf.id));
        cf.channels.push_back(p);
      }
    }
    if (!is_valid_case_id(cf.id)) {
      throw DataError(
          fmt::format("{}: case id '{}' may hold only letters, digits, '_', '-' and '.'", f.string(), cf.id));
    }
    if (!folders.labels.empty()) {
      for (const char* e : {".nii.gz", ".nii"}) {
        const fs::path p = folders.labels / (cf.id + e);
        if (fs::exists(p, ec)) cf.label = p;
      }
      if (!cf.label) {
        throw DataError(
            fmt::format("{}: no label file for case '{}' (expected {}.nii.gz)", folders.labels.string(), cf.id, cf.id));
      }
      layout.labelled.push_back(std::move(cf));
    } else {
      layout.unlabelled.push_back(std::move(cf));
    }
  }
  if (layout.labelled.empty() && layout.unlabelled.empty()) {
    throw DataError(fmt::format("{}: no NIfTI images{}", folders.images.string(),
                                suffixes.empty() ? std::string() : fmt::format(" ending in {}", suffixes[0])));
  }
  return layout;
}

std::map<std::string, fs::path> files_by_stem(const fs::path& dir, const std::function<bool(const fs::path&)>& accept,
                                              const std::function<std::string(const std::string&)>& duplicate) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw DataError(fmt::format("{}: folder not found", dir.string()));
  std::map<std::string, fs::path> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!e.is_regular_file() || e.path().filename().string()[0] == '.' || !accept(e.path())) continue;
    const auto [it, added] = out.emplace(e.path().stem().string(), e.path());
    if (!added) {
      // Named in sorted order, by value: std::minmax over two temporaries returned dangling references.
      std::array<std::string, 2> both = {it->second.string(), e.path().string()};
      std::sort(both.begin(), both.end());
      throw DataError(fmt::format("{} and {}: {}; keep one", both[0], both[1], duplicate(it->first)));
    }
  }
  if (ec) throw DataError(fmt::format("{}: cannot list the folder: {}", dir.string(), ec.message()));
  return out;
}

std::string case_id_from(const std::string& name, const std::string& prefix) {
  std::string id;
  for (const char ch : name) {
    id += (std::isalnum(static_cast<unsigned char>(ch)) || ch == '_' || ch == '-' || ch == '.') ? ch : '_';
  }
  if (id.empty() || id[0] == '.') id = prefix + id;
  if (id.size() > kMaxCaseIdChars) id = id.substr(0, kMaxCaseIdChars - 9) + "_" + sha256_hex(name).substr(0, 8);
  return id;
}

std::vector<int64_t> label_values(const torch::Tensor& labels, const fs::path& file) {
  torch::Tensor x = labels;
  if (x.is_floating_point()) {
    const int64_t bad = (~torch::isfinite(x)).sum().item<int64_t>();
    if (bad > 0) throw DataError(fmt::format("{}: {} NaN or Inf voxels in a label file", file.string(), bad));
    const auto frac = x != torch::round(x);
    if (frac.any().item<bool>()) {
      throw DataError(fmt::format("{}: holds non-integer values such as {:g}; a label file holds class numbers",
                                  file.string(), x.masked_select(frac)[0].item<double>()));
    }
  }
  x = x.to(torch::kInt64).flatten();
  const int64_t lo = x.min().item<int64_t>(), hi = x.max().item<int64_t>();
  if (lo < 0) throw DataError(fmt::format("{}: holds the negative label value {}", file.string(), lo));
  if (hi > 255)
    throw DataError(fmt::format("{}: holds the label value {}; at most 255 is supported", file.string(), hi));
  const torch::Tensor counts = torch::bincount(x, /*weights=*/{}, /*minlength=*/hi + 1);
  std::vector<int64_t> present;
  const auto c = counts.accessor<int64_t, 1>();
  for (int64_t v = 0; v <= hi; ++v) {
    if (c[v] > 0) present.push_back(v);
  }
  return present;
}

void split_cases(const std::vector<std::string>& ids, double val_fraction, uint64_t seed,
                 std::vector<std::string>& train, std::vector<std::string>& val) {
  const int64_t n = static_cast<int64_t>(ids.size());
  int64_t n_val = val_fraction > 0 ? std::max<int64_t>(1, std::llround(static_cast<double>(n) * val_fraction)) : 0;
  n_val = std::min(n_val, n - 1);
  std::vector<int64_t> order(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) order[static_cast<size_t>(i)] = i;
  Rng rng(seed, /*a=*/0x5B117, /*b=*/0);
  for (int64_t i = n - 1; i > 0; --i)
    std::swap(order[static_cast<size_t>(i)], order[static_cast<size_t>(rng.uniform_int(i + 1))]);
  std::set<int64_t> is_val(order.begin(), order.begin() + std::max<int64_t>(0, n_val));
  for (int64_t i = 0; i < n; ++i) (is_val.count(i) ? val : train).push_back(ids[static_cast<size_t>(i)]);
}

ImportProgress::ImportProgress(int64_t cases) : cases_(cases), last_(std::chrono::steady_clock::now()) {}

void ImportProgress::written(int64_t i) {
  const auto now = std::chrono::steady_clock::now();
  if (std::chrono::duration<double>(now - last_).count() > 10 || i + 1 == cases_) {
    last_ = now;
    spdlog::info("import: {}/{} cases", i + 1, cases_);
  }
}

Splits labelled_splits(const std::vector<std::string>& labelled, std::vector<std::string> unlabelled,
                       double val_fraction, uint64_t seed) {
  Splits s;
  if (!labelled.empty()) split_cases(labelled, val_fraction, seed, s.train, s.val);
  s.test = std::move(unlabelled);
  return s;
}

void commit_splits(DatasetWriter& writer, const NamedSplits& splits) {
  for (const auto& [name, ids] : splits) writer.set_split(name, ids);
  writer.commit();
}

}  // namespace import_detail

std::string normalization_for_channel_name(const std::string& name) {
  const std::string n = to_lower(name);
  if (n == "ct") return "ct";
  if (n == "nonorm" || n == "none") return "none";
  if (n == "rescale_to_0_1") return "minmax";
  if (n == "rgb_to_0_1") return "scale:255";
  return "zscore";
}

}  // namespace u3d
