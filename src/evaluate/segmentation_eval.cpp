#include "u3d/evaluate/segmentation_eval.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/parallel.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"
#include "u3d/evaluate/metrics.h"
#include "u3d/io/import.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;
constexpr double kInf = std::numeric_limits<double>::infinity();
constexpr double kNaN = std::numeric_limits<double>::quiet_NaN();

// Bounding box [lo, hi) of the true voxels of `mask`, grown by `margin` and clipped to the volume.
bool bounding_box(const torch::Tensor& mask, int64_t margin, std::array<int64_t, 3>& lo, std::array<int64_t, 3>& hi) {
  const torch::Tensor idx = mask.nonzero();  // (n, 3)
  if (idx.size(0) == 0) return false;
  const torch::Tensor mn = std::get<0>(idx.min(0)), mx = std::get<0>(idx.max(0));
  for (int a = 0; a < 3; ++a) {
    lo[a] = std::max<int64_t>(0, mn[a].item<int64_t>() - margin);
    hi[a] = std::min<int64_t>(mask.size(a), mx[a].item<int64_t>() + 1 + margin);
  }
  return true;
}

torch::Tensor crop(const torch::Tensor& t, const std::array<int64_t, 3>& lo, const std::array<int64_t, 3>& hi) {
  return t.slice(0, lo[0], hi[0]).slice(1, lo[1], hi[1]).slice(2, lo[2], hi[2]);
}

std::vector<double> directed_distances(const torch::Tensor& from_surface, const torch::Tensor& to_distance) {
  const torch::Tensor d = to_distance.masked_select(from_surface).contiguous();
  return std::vector<double>(d.data_ptr<double>(), d.data_ptr<double>() + d.numel());
}

// The label file formats read: NIfTI (.nii.gz, .nii) and 3D TIFF (.tif, .tiff, any case).
bool is_tiff_path(const fs::path& p) {
  const std::string ext = to_lower(p.extension().string());
  return ext == ".tif" || ext == ".tiff";
}

std::string case_id_of(const fs::path& p) {
  const std::string name = p.filename().string();
  if (is_tiff_path(p)) return p.stem().string();
  const size_t cut = name.size() >= 7 && name.compare(name.size() - 7, 7, ".nii.gz") == 0 ? 7 : 4;
  return name.substr(0, name.size() - cut);
}

// Case id -> label file of every NIfTI and TIFF file in `dir`; DataError for two files of one case.
std::map<std::string, fs::path> label_files_by_case(const fs::path& dir) {
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) throw UsageError(fmt::format("{}: folder not found", dir.string()));
  std::map<std::string, fs::path> out;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::path& path = e.path();
    if (!e.is_regular_file() || path.filename().string()[0] == '.') continue;
    if (!is_nifti_path(path) && !is_tiff_path(path)) continue;
    const auto [at, fresh] = out.emplace(case_id_of(path), path);
    if (!fresh) {
      std::string first = at->second.filename().string(), second = path.filename().string();
      if (second < first) std::swap(first, second);  // the same message whatever the listing order
      throw DataError(fmt::format("{}: {} and {} are two label files of case '{}'; keep one", dir.string(), first,
                                  second, at->first));
    }
  }
  if (ec) throw DataError(fmt::format("{}: cannot list the folder: {}", dir.string(), ec.message()));
  return out;
}

// A label file as a volume with its geometry; TIFF has no voxel size: format "tiff", spacing 1.
NiftiVolume read_label_file(const fs::path& path) {
  if (!is_tiff_path(path)) return read_nifti(path);
  NiftiVolume v;
  v.data = read_tiff_volume(path);
  v.geometry = plain_geometry({v.data.size(0), v.data.size(1), v.data.size(2)}, {1.0, 1.0, 1.0});
  v.geometry.format = "tiff";
  return v;
}

// The first `limit` of `ids`, joined by ", ", with "..." when there are more.
std::string id_list(const std::vector<std::string>& ids, size_t limit = 10) {
  std::string out;
  for (size_t i = 0; i < ids.size() && i < limit; ++i) out += (i ? ", " : "") + ids[i];
  return ids.size() > limit ? out + ", ..." : out;
}

// Label names from dataset.json beside the reference folder (nnU-Net: labelsTr/../dataset.json).
std::map<int64_t, std::string> names_from_dataset_json(const fs::path& reference) {
  std::map<int64_t, std::string> names;
  const fs::path json = fs::absolute(reference).lexically_normal().parent_path() / "dataset.json";
  std::error_code ec;
  if (!fs::exists(json, ec)) return names;
  try {
    const Json labels = parse_json(read_file(json), json.string()).value("labels", Json());
    for (const auto& [name, value] : labels.items()) {
      if (value.is_number_integer()) names[value.get<int64_t>()] = name;
      if (value.is_string()) names[parse_int(value.get<std::string>()).value_or(-1)] = name;
    }
  } catch (const std::exception&) {
    return {};  // names are a convenience; the numbers still identify the labels
  }
  return names;
}

std::string number(double v, int precision) {
  if (std::isnan(v)) return "";
  if (std::isinf(v)) return "inf";
  return fmt::format("{:.{}f}", v, precision);
}

}  // namespace

torch::Tensor surface_voxels(const torch::Tensor& mask) {
  const torch::Tensor m = mask.to(torch::kBool);
  const torch::Tensor p = torch::constant_pad_nd(m.to(torch::kUInt8), {1, 1, 1, 1, 1, 1}, 0).to(torch::kBool);
  const int64_t d = m.size(0), h = m.size(1), w = m.size(2);
  auto shifted = [&](int64_t dz, int64_t dy, int64_t dx) {
    return p.slice(0, 1 + dz, 1 + dz + d).slice(1, 1 + dy, 1 + dy + h).slice(2, 1 + dx, 1 + dx + w);
  };
  const torch::Tensor interior = m & shifted(-1, 0, 0) & shifted(1, 0, 0) & shifted(0, -1, 0) & shifted(0, 1, 0) &
                                 shifted(0, 0, -1) & shifted(0, 0, 1);
  return m & ~interior;
}

double dice_score(const torch::Tensor& a, const torch::Tensor& b) {
  const auto x = a.to(torch::kBool), y = b.to(torch::kBool);
  const double total = static_cast<double>(x.sum().item<int64_t>() + y.sum().item<int64_t>());
  if (total == 0) return kNaN;
  return 2.0 * static_cast<double>((x & y).sum().item<int64_t>()) / total;
}

double hausdorff95(const torch::Tensor& a, const torch::Tensor& b, const std::array<double, 3>& spacing) {
  const auto x = a.to(torch::kBool), y = b.to(torch::kBool);
  const bool has_x = x.any().item<bool>(), has_y = y.any().item<bool>();
  if (!has_x && !has_y) return kNaN;
  if (!has_x || !has_y) return kInf;
  std::array<int64_t, 3> lo{}, hi{};
  bounding_box(x | y, /*margin=*/1, lo, hi);  // distances between the surfaces never leave this box
  const torch::Tensor cx = crop(x, lo, hi), cy = crop(y, lo, hi);
  // A crop face inside the volume lies beyond the margin, outside both masks; a face on the volume
  // border is outside too: surface_voxels pads with "outside" either way.
  const torch::Tensor sx = surface_voxels(cx), sy = surface_voxels(cy);
  const double dxy = percentile(directed_distances(sx, distance_transform(sy, spacing)), 95.0);
  const double dyx = percentile(directed_distances(sy, distance_transform(sx, spacing)), 95.0);
  return std::max(dxy, dyx);
}

torch::Tensor label_equals(const torch::Tensor& labels, int64_t value) {
  if (labels.is_floating_point()) return labels.eq(static_cast<double>(value));
  // An integer tensor compares against a value cast to its own type (uint8: 258 -> 2); a value the
  // type cannot hold is in no voxel.
  int64_t lo = std::numeric_limits<int64_t>::min(), hi = std::numeric_limits<int64_t>::max();
  switch (labels.scalar_type()) {
    case torch::kBool: lo = 0, hi = 1; break;
    case torch::kUInt8: lo = 0, hi = 255; break;
    case torch::kInt8: lo = -128, hi = 127; break;
    case torch::kInt16: lo = INT16_MIN, hi = INT16_MAX; break;
    case torch::kInt32: lo = INT32_MIN, hi = INT32_MAX; break;
    default: break;
  }
  if (value < lo || value > hi) return torch::zeros(labels.sizes(), labels.options().dtype(torch::kBool));
  return labels.eq(value);
}

CaseEvaluation evaluate_case(const torch::Tensor& pred, const torch::Tensor& ref, const std::vector<int64_t>& labels,
                             const std::array<double, 3>& spacing) {
  CaseEvaluation c;
  for (int64_t v : labels) {
    const torch::Tensor p = label_equals(pred, v), r = label_equals(ref, v);
    c.scores.push_back({dice_score(p, r), hausdorff95(p, r, spacing)});
  }
  return c;
}

std::vector<LabelPair> match_label_files(const fs::path& reference, const fs::path& predictions, bool only_predicted) {
  const auto refs = label_files_by_case(reference);
  const auto preds = label_files_by_case(predictions);
  if (preds.empty()) {
    throw DataError(fmt::format("{}: no label files (NIfTI .nii.gz, .nii or TIFF .tif, .tiff)", predictions.string()));
  }
  std::vector<LabelPair> pairs;
  for (const auto& [id, path] : preds) {
    if (!refs.count(id)) {
      throw DataError(fmt::format("{}: no reference for case '{}' in {}", path.string(), id, reference.string()));
    }
    pairs.push_back({id, path, refs.at(id)});
  }
  std::vector<std::string> unpredicted;
  for (const auto& [id, path] : refs) {
    if (!preds.count(id)) unpredicted.push_back(id);
  }
  if (!unpredicted.empty() && !only_predicted) {
    throw DataError(fmt::format(
        "{}: no prediction for {} of the {} reference cases in {}: {}; predict them, or pass --only-predicted to "
        "score the {} predicted cases alone",
        predictions.string(), unpredicted.size(), refs.size(), reference.string(), id_list(unpredicted), pairs.size()));
  }
  if (!unpredicted.empty()) {
    spdlog::warn(
        "evaluate: {} of the {} reference cases in {} have no prediction and are not scored "
        "(--only-predicted): {}",
        unpredicted.size(), refs.size(), reference.string(), id_list(unpredicted));
  }
  return pairs;
}

void read_label_pair(const LabelPair& pair, NiftiVolume& p, NiftiVolume& r) {
  const fs::path& pp = pair.prediction;
  const fs::path& rp = pair.reference;
  r = read_label_file(rp);
  p = read_label_file(pp);
  if (p.geometry.shape != r.geometry.shape) {
    throw DataError(fmt::format("{}: dims {}x{}x{} differ from the reference {} ({}x{}x{})", pp.string(),
                                p.geometry.shape[2], p.geometry.shape[1], p.geometry.shape[0], rp.string(),
                                r.geometry.shape[2], r.geometry.shape[1], r.geometry.shape[0]));
  }
  const bool tiff = p.geometry.format == "tiff" || r.geometry.format == "tiff";  // no voxel size to compare
  for (int a = 0; a < 3 && !tiff; ++a) {
    if (std::abs(p.geometry.spacing[a] - r.geometry.spacing[a]) > 1e-4 * std::max(1.0, r.geometry.spacing[a])) {
      throw DataError(fmt::format("{}: voxel size differs from the reference {}", pp.string(), rp.string()));
    }
  }
  if (r.geometry.format == "tiff") r.geometry.spacing = p.geometry.spacing;  // the NIfTI one's, if any
  for (const NiftiVolume* v : {&p, &r}) {
    const std::string file = (v == &p ? pp : rp).string();
    if (v->data.is_floating_point() && (v->data != torch::round(v->data)).any().item<bool>()) {
      throw DataError(fmt::format("{}: holds non-integer values; expected labels", file));
    }
    // Never read as background (the segmentation labels found are those above 0) nor wrapped.
    if (v->data.numel() > 0 && v->data.min().item<double>() < 0) {
      throw DataError(fmt::format("{}: holds the negative label value {}; labels are 0 (background) and above", file,
                                  v->data.min().item<double>()));
    }
  }
}

SegmentationEvaluation evaluate_segmentation_folders(const SegmentationEvalOptions& o) {
  const std::vector<LabelPair> pairs = match_label_files(o.reference, o.predictions, o.only_predicted);
  const int64_t n = static_cast<int64_t>(pairs.size());
  // Read and check every pair, with the labels present, then score (labels known up front or found).
  std::vector<std::set<int64_t>> present(static_cast<size_t>(n));
  SegmentationEvaluation e;
  auto load = [&](int64_t i, NiftiVolume& p, NiftiVolume& r) { read_label_pair(pairs[static_cast<size_t>(i)], p, r); };
  const int64_t threads = resolve_threads(o.threads);
  std::vector<int64_t> labels = o.labels;
  if (labels.empty()) {
    parallel_for(n, threads, [&](int64_t i) {
      NiftiVolume p, r;
      load(i, p, r);
      for (const torch::Tensor& t : {p.data, r.data}) {
        const torch::Tensor u = std::get<0>(torch::_unique(t.to(torch::kInt64)));
        for (int64_t k = 0; k < u.numel(); ++k) {
          if (u[k].item<int64_t>() > 0) present[static_cast<size_t>(i)].insert(u[k].item<int64_t>());
        }
      }
    });
    std::set<int64_t> found;
    for (const auto& s : present) found.insert(s.begin(), s.end());
    labels.assign(found.begin(), found.end());
    if (labels.empty()) throw DataError("evaluate: no foreground label in any reference or prediction");
  }
  e.labels = labels;
  const auto json_names = names_from_dataset_json(o.reference);
  for (size_t k = 0; k < labels.size(); ++k) {
    if (k < o.names.size()) {
      e.names.push_back(o.names[k]);
    } else if (json_names.count(labels[k])) {
      e.names.push_back(json_names.at(labels[k]));
    } else {
      e.names.push_back(fmt::format("label_{}", labels[k]));
    }
  }
  e.cases.resize(static_cast<size_t>(n));
  parallel_for(n, threads, [&](int64_t i) {
    NiftiVolume p, r;
    load(i, p, r);
    CaseEvaluation c = evaluate_case(p.data, r.data, labels, r.geometry.spacing);
    c.id = pairs[static_cast<size_t>(i)].id;
    e.cases[static_cast<size_t>(i)] = std::move(c);
  });
  for (size_t k = 0; k < labels.size(); ++k) {
    std::vector<double> d, h;
    int64_t inf = 0;
    for (const auto& c : e.cases) {
      d.push_back(c.scores[k].dice);
      h.push_back(c.scores[k].hd95);
      inf += std::isinf(c.scores[k].hd95) ? 1 : 0;
    }
    e.mean_dice.push_back(nan_mean(d));
    e.mean_hd95.push_back(nan_mean(h));
    e.infinite_hd95.push_back(inf);
  }
  return e;
}

std::string evaluation_csv(const SegmentationEvaluation& e) {
  std::string out = csv_row({"case", "label", "name", "dice", "hd95_mm"});
  for (const auto& c : e.cases) {
    for (size_t k = 0; k < e.labels.size(); ++k) {
      out += csv_row(
          {c.id, std::to_string(e.labels[k]), e.names[k], number(c.scores[k].dice, 6), number(c.scores[k].hd95, 4)});
    }
  }
  for (size_t k = 0; k < e.labels.size(); ++k) {
    out += csv_row(
        {"mean", std::to_string(e.labels[k]), e.names[k], number(e.mean_dice[k], 6), number(e.mean_hd95[k], 4)});
  }
  out += csv_row({"mean", "all", "all", number(nan_mean(e.mean_dice), 6), number(nan_mean(e.mean_hd95), 4)});
  return out;
}

std::string evaluation_table(const SegmentationEvaluation& e) {
  size_t id_width = 4;
  for (const auto& c : e.cases) id_width = std::max(id_width, c.id.size());
  std::string out = fmt::format("{:<{}}", "case", id_width);
  for (const auto& name : e.names) out += fmt::format(" | {:>22}", fmt::format("{} Dice / HD95 mm", name));
  out += "\n" + std::string(out.size() - 1, '-') + "\n";
  auto cell = [](double dice, double hd) {
    return fmt::format(" | {:>10} / {:>9}", std::isnan(dice) ? "-" : number(dice, 4),
                       std::isnan(hd) ? "-" : number(hd, 2));
  };
  for (const auto& c : e.cases) {
    out += fmt::format("{:<{}}", c.id, id_width);
    for (const auto& s : c.scores) out += cell(s.dice, s.hd95);
    out += "\n";
  }
  out += fmt::format("{:<{}}", "mean", id_width);
  for (size_t k = 0; k < e.labels.size(); ++k) out += cell(e.mean_dice[k], e.mean_hd95[k]);
  out += "\n";
  for (size_t k = 0; k < e.labels.size(); ++k) {
    if (e.infinite_hd95[k] > 0) {
      out += fmt::format("{}: HD95 is inf in {} case(s) (label in only one volume), left out of the mean\n", e.names[k],
                         e.infinite_hd95[k]);
    }
  }
  return out;
}

}  // namespace u3d
