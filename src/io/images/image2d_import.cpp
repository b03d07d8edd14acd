// `trainer import images`: folders of 2D slices into the dataset format v1 (io/images/image2d_import.h).
#include "u3d/io/images/image2d_import.h"

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <map>
#include <optional>
#include <regex>
#include <set>

#include "../import_layout.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/parallel.h"
#include "u3d/core/staged_folder.h"
#include "u3d/core/text.h"
#include "u3d/io/images/image2d.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

struct Slice {
  std::string stem;  // the image's file name without its ending
  fs::path image, mask;
};

struct SliceCase {
  std::string id;
  std::vector<Slice> slices;  // natural order of the stems
};

// A mask's stem: longer than a non-empty mask suffix it ends with.
bool has_mask_suffix(const std::string& stem, const std::string& suffix) {
  return !suffix.empty() && stem.size() > suffix.size() && ends_with(stem, suffix);
}

// Image files of `dir` (not hidden) by stem; DataError for a missing folder or two files of one stem.
std::map<std::string, fs::path> image_files_in(const fs::path& dir) {
  return import_detail::files_by_stem(dir, is_image2d_path,
                                      [](const std::string&) { return "two images of one name"; });
}

bool same_folder(const fs::path& a, const fs::path& b) {
  std::error_code ec;
  return fs::equivalent(a, b, ec);
}

// Images paired with their masks, in no order yet.
std::vector<Slice> pair_slices(const ImagesImportOptions& o) {
  const bool beside = o.labels.empty() || same_folder(o.images, o.labels);
  std::map<std::string, fs::path> images = image_files_in(o.images), masks;
  if (beside) {
    for (auto it = images.begin(); it != images.end();) {
      if (has_mask_suffix(it->first, o.mask_suffix)) {
        masks.emplace(it->first.substr(0, it->first.size() - o.mask_suffix.size()), it->second);
        it = images.erase(it);
      } else {
        ++it;
      }
    }
  } else {
    for (const auto& [stem, path] : image_files_in(o.labels)) {
      const std::string key =
          has_mask_suffix(stem, o.mask_suffix) ? stem.substr(0, stem.size() - o.mask_suffix.size()) : stem;
      const auto [it, added] = masks.emplace(key, path);
      if (!added) {
        throw DataError(
            fmt::format("{} and {}: two masks of image '{}'; keep one", it->second.string(), path.string(), key));
      }
    }
  }
  if (images.empty()) {
    throw DataError(
        fmt::format("{}: no images (*.png, *.tif, *.tiff other than *{}.*)", o.images.string(), o.mask_suffix));
  }
  std::vector<Slice> slices;
  if (o.unlabelled_classes > 0) {
    for (const auto& [stem, path] : images) slices.push_back({stem, path, {}});
    return slices;
  }
  std::vector<std::string> unpaired;
  for (const auto& [stem, path] : images) {
    const auto m = masks.find(stem);
    if (m == masks.end()) {
      unpaired.push_back(fmt::format("{} (no mask {}{}.png)", path.string(), stem, o.mask_suffix));
    } else {
      slices.push_back({stem, path, m->second});
    }
  }
  for (const auto& [stem, path] : masks) {
    if (!images.count(stem)) unpaired.push_back(fmt::format("{} (no image {}.png)", path.string(), stem));
  }
  if (!unpaired.empty() && !o.skip_unpaired) {
    throw DataError(
        fmt::format("{} unpaired file(s), images and masks are paired by name (--skip-unpaired leaves "
                    "them out): {}",
                    unpaired.size(), fmt::join(unpaired, ", ")));
  }
  if (!unpaired.empty()) {
    spdlog::warn("import images: left out {} unpaired file(s) (--skip-unpaired): {}", unpaired.size(),
                 fmt::join(unpaired, ", "));
  }
  if (slices.empty()) throw DataError(fmt::format("{}: no image has a mask", o.images.string()));
  return slices;
}

std::vector<SliceCase> group_slices(std::vector<Slice> slices, const std::string& pattern) {
  std::map<std::string, std::vector<Slice>> groups;
  for (auto& s : slices) {
    const auto id = slice_case(s.stem, pattern);
    if (!id) {
      throw DataError(fmt::format("{}: --group '{}' does not match the name '{}'", s.image.string(), pattern, s.stem));
    }
    if (!is_valid_case_id(*id)) {
      throw DataError(fmt::format("{}: its case '{}' may hold only letters, digits, '_', '-' and '.' (see --group)",
                                  s.image.string(), *id));
    }
    groups[*id].push_back(std::move(s));
  }
  std::vector<SliceCase> cases;
  for (auto& [id, list] : groups) {
    std::sort(list.begin(), list.end(), [](const Slice& a, const Slice& b) { return natural_less(a.stem, b.stem); });
    cases.push_back({id, std::move(list)});
  }
  return cases;
}

void check_options(const ImagesImportOptions& o) {
  const auto fraction = [](double f) { return f >= 0 && f < 1; };
  if (!fraction(o.val_fraction)) {
    throw UsageError(fmt::format("import images: --val-fraction {}: expected a value in [0, 1)", o.val_fraction));
  }
  if (!fraction(o.test_fraction) || o.val_fraction + o.test_fraction >= 1) {
    throw UsageError(
        fmt::format("import images: --test-fraction {}: expected a value in [0, 1) that leaves cases for training with "
                    "--val-fraction {}",
                    o.test_fraction, o.val_fraction));
  }
  if (!o.group.empty()) {
    std::regex re;
    try {
      re = std::regex(o.group);
    } catch (const std::regex_error& e) {
      throw UsageError(fmt::format("import images: --group '{}': not a regular expression ({})", o.group, e.what()));
    }
    if (re.mark_count() != 1) {
      throw UsageError(fmt::format("import images: --group '{}': expected one capture group (the case), found {}",
                                   o.group, re.mark_count()));
    }
  }
}

// The mask values of every slice of a case (ascending) and how many of its files were palette PNGs.
struct MaskScan {
  std::vector<int64_t> values;
  int64_t indexed = 0;
};

MaskScan scan_masks(const SliceCase& c) {
  std::set<int64_t> values;
  MaskScan s;
  for (const auto& sl : c.slices) {
    const Image2d m = read_mask2d(sl.mask);
    s.indexed += m.indexed;
    for (const int64_t v : import_detail::label_values(m.pixels, sl.mask)) values.insert(v);
  }
  s.values.assign(values.begin(), values.end());
  return s;
}

// The case's image (1, S, H, W) and labels (S, H, W) uint8 (none for unlabelled slices); `binary`:
// mask 255 -> 1.
CaseData load_case(const SliceCase& c, bool binary, std::atomic<int64_t>& color) {
  std::vector<torch::Tensor> images, labels;
  const Slice& first = c.slices.front();
  for (const auto& sl : c.slices) {
    const Image2d im = read_image2d(sl.image);
    color += im.color;
    const Image2d m = sl.mask.empty() ? im : read_mask2d(sl.mask);
    if (m.pixels.sizes() != im.pixels.sizes()) {
      throw DataError(fmt::format("{} is {} but its image {} is {} (H x W)", sl.mask.string(),
                                  fmt::join(m.pixels.sizes(), "x"), sl.image.string(),
                                  fmt::join(im.pixels.sizes(), "x")));
    }
    if (!images.empty() && im.pixels.sizes() != images.front().sizes()) {
      throw DataError(fmt::format("{} is {} but {} of the same case '{}' is {} (H x W); a case's slices share a size",
                                  sl.image.string(), fmt::join(im.pixels.sizes(), "x"), first.image.string(), c.id,
                                  fmt::join(images.front().sizes(), "x")));
    }
    images.push_back(im.pixels);
    if (!sl.mask.empty()) labels.push_back(binary ? (m.pixels == 255).to(torch::kUInt8) : m.pixels.to(torch::kUInt8));
  }
  const bool all_u8 =
      std::all_of(images.begin(), images.end(), [](const auto& t) { return t.scalar_type() == torch::kUInt8; });
  const bool any_float = std::any_of(images.begin(), images.end(), [](const auto& t) { return t.is_floating_point(); });
  torch::Tensor v = torch::stack(images);
  if (any_float) {
    v = v.to(torch::kFloat);
    const int64_t bad = (~torch::isfinite(v)).sum().item<int64_t>();
    if (bad > 0) throw DataError(fmt::format("case '{}': its images hold {} NaN or Inf pixels", c.id, bad));
  } else if (!all_u8) {
    v = v.to(torch::kInt32);
    if (v.min().item<int64_t>() >= INT16_MIN && v.max().item<int64_t>() <= INT16_MAX) v = v.to(torch::kInt16);
  }
  CaseData out;
  out.id = c.id;
  out.spacing = {1.0, 1.0, 1.0};
  out.image = v.unsqueeze(0).contiguous();
  if (!labels.empty()) out.target = torch::stack(labels).contiguous();
  out.source = plain_geometry({v.size(0), v.size(1), v.size(2)}, out.spacing);
  out.source->format = "slices";
  out.source->file_ending = ".tif";  // the case's volume prediction <case>.tif beside its folder of PNG masks
  for (const auto& sl : c.slices) out.source->files.push_back(fs::absolute(sl.image).string());
  for (const auto& sl : c.slices) {
    if (!sl.mask.empty()) out.source->files.push_back(fs::absolute(sl.mask).string());
  }
  return out;
}

int64_t slices_in(const std::vector<SliceCase>& cases) {
  int64_t n = 0;
  for (const auto& c : cases) n += static_cast<int64_t>(c.slices.size());
  return n;
}

}  // namespace

std::optional<std::string> slice_case(const std::string& stem, const std::string& pattern) {
  static const std::regex kDefault("^(.*)[_-][0-9]+$");
  std::smatch m;
  if (pattern.empty()) {
    if (std::regex_match(stem, m, kDefault) && m[1].length() > 0) return m[1].str();
    return stem;
  }
  if (!std::regex_search(stem, m, std::regex(pattern)) || m.size() < 2 || m[1].length() == 0) return std::nullopt;
  return m[1].str();
}

bool natural_less(const std::string& a, const std::string& b) {
  size_t i = 0, j = 0;
  const auto digit = [](char c) { return c >= '0' && c <= '9'; };
  while (i < a.size() && j < b.size()) {
    if (digit(a[i]) && digit(b[j])) {
      size_t ie = i, je = j;
      while (ie < a.size() && digit(a[ie])) ++ie;
      while (je < b.size() && digit(b[je])) ++je;
      std::string x = a.substr(i, ie - i), y = b.substr(j, je - j);
      x.erase(0, std::min(x.find_first_not_of('0'), x.size()));
      y.erase(0, std::min(y.find_first_not_of('0'), y.size()));
      if (x.size() != y.size()) return x.size() < y.size();
      if (x != y) return x < y;
      i = ie;
      j = je;
    } else {
      if (a[i] != b[j]) return a[i] < b[j];
      ++i;
      ++j;
    }
  }
  if ((a.size() - i) != (b.size() - j)) return a.size() - i < b.size() - j;
  return a < b;  // equal up to leading zeros: a fixed order
}

ImportSummary import_images(const ImagesImportOptions& o, const fs::path& out) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(o);
  const std::vector<SliceCase> cases = group_slices(pair_slices(o), o.group);
  for (const auto& c : cases) {
    for (const auto& s : c.slices) {
      refuse_output_over_input("import images", "--out", out, {s.image});
      if (!s.mask.empty()) refuse_output_over_input("import images", "--out", out, {s.mask});
    }
  }
  const int64_t n = static_cast<int64_t>(cases.size());
  const int64_t threads = resolve_threads(o.threads);

  // The label mapping: every mask's values, read first (in parallel).
  const bool unlabelled = o.unlabelled_classes > 0;
  std::vector<MaskScan> scans(unlabelled ? 0 : cases.size());
  if (!unlabelled) {
    parallel_for(n, threads,
                 [&](int64_t i) { scans[static_cast<size_t>(i)] = scan_masks(cases[static_cast<size_t>(i)]); });
  }
  std::set<int64_t> values;
  int64_t indexed_masks = 0;
  for (const auto& s : scans) {
    values.insert(s.values.begin(), s.values.end());
    indexed_masks += s.indexed;
  }
  const bool binary = unlabelled
                          ? o.unlabelled_classes == 2
                          : std::all_of(values.begin(), values.end(), [](int64_t v) { return v == 0 || v == 255; });
  if (!binary && values.count(255)) {
    for (size_t i = 0; i < scans.size(); ++i) {
      if (std::count(scans[i].values.begin(), scans[i].values.end(), 255)) {
        throw DataError(fmt::format(
            "case '{}' ({}...): the masks hold the values {{{}}}; expected {{0, 255}} (binary) or 0..K (labels)",
            cases[i].id, cases[i].slices.front().mask.string(), fmt::join(values, ", ")));
      }
    }
  }
  DatasetInfo info;
  info.task = Task::kSegmentation;
  info.channel_names = {"image"};
  info.target_name = "labels";
  info.num_classes = unlabelled ? o.unlabelled_classes : binary ? 2 : std::max<int64_t>(2, *values.rbegin() + 1);
  for (int64_t k = 0; k < info.num_classes; ++k) {
    info.class_names.push_back(k == 0 ? "background" : binary ? "foreground" : fmt::format("class_{}", k));
  }
  info.description = fmt::format("imported from 2D image folder {}", fs::absolute(o.images).string());
  if (unlabelled) {
    spdlog::info("import images: {} unlabelled case(s) for prediction ({} classes)", n, info.num_classes);
  } else if (binary) {
    spdlog::info("import images: mask values {{{}}} -> labels 0 background, 1 foreground (255)",
                 fmt::join(values, ", "));
  } else {
    spdlog::info("import images: mask values {{{}}} are the labels (classes 0..{})", fmt::join(values, ", "),
                 info.num_classes - 1);
  }

  DatasetWriteOptions wo;
  wo.compression_level = o.compression_level;
  DatasetWriter writer(out, info, wo);
  // The reference volumes are written to a folder staged beside --reference-out and moved in, file by
  // file, once the dataset is committed: a failed import adds no file there (the staged folder goes).
  std::optional<StagedFolder> references;
  if (!o.reference_out.empty() && !unlabelled) {
    ensure_writable_directory(o.reference_out);
    references.emplace(o.reference_out);
  }
  std::atomic<int64_t> color_images{0};
  ordered_pipeline(
      n, threads, /*window=*/threads,
      [&](int64_t i) {
        const CaseData c = load_case(cases[static_cast<size_t>(i)], binary, color_images);
        if (references && c.target.defined()) write_tiff_volume(references->path() / (c.id + ".tif"), c.target);
        return writer.prepare(c);
      },
      [&](int64_t, std::shared_ptr<const PreparedCase> c) { writer.write_case(*c); });
  const int64_t slices = slices_in(cases);
  if (color_images > 0) {
    spdlog::warn("import images: {} colour image(s) converted to grey (sRGB luminance)", color_images.load());
  }
  if (indexed_masks > 0) spdlog::info("import images: {} palette mask(s) read as their palette indices", indexed_masks);
  ImportSummary summary;
  summary.channel_normalization = {"zscore"};
  std::vector<std::string> ids, rest;
  import_detail::Splits splits;
  for (const auto& c : cases) ids.push_back(c.id);
  if (unlabelled) {
    splits.test = ids;
  } else {
    import_detail::split_cases(ids, o.test_fraction, o.seed + 1, rest, splits.test);
  }
  const double val_share =
      rest.empty() ? 0 : o.val_fraction * static_cast<double>(n) / static_cast<double>(rest.size());
  import_detail::split_cases(rest, std::min(val_share, 0.99), o.seed, splits.train, splits.val);
  for (const auto& [name, share, list] :
       {std::tuple{"val", o.val_fraction, &splits.val}, std::tuple{"test", o.test_fraction, &splits.test}}) {
    if (!unlabelled && share > 0 && list->empty()) {
      spdlog::warn(
          "import images: --{}-fraction {} leaves split '{}' empty: the {} slices make {} case(s) (splits are drawn "
          "per case; --group names the cases)",
          name, share, name, slices, n);
    }
  }
  import_detail::commit_import(writer, splits, summary.channel_normalization, summary,
                               /*train_always=*/!unlabelled);
  if (references) {
    for (const auto& c : cases) fs::rename(references->path() / (c.id + ".tif"), o.reference_out / (c.id + ".tif"));
  }
  spdlog::info(
      "import: wrote {} from {}: {} slices in {} cases, {} train / {} val / {} test cases, {} classes in {:.1f} s",
      out.string(), o.images.string(), slices, n, summary.train, summary.val, summary.test, info.num_classes,
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return summary;
}

}  // namespace u3d
