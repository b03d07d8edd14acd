// `trainer import tiff`: folders of 3D TIFF volumes (io/tiff/tiff.h) into the dataset format v1.
#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <array>
#include <cctype>
#include <chrono>
#include <cmath>
#include <map>
#include <optional>

#include "../import_layout.h"
#include "u3d/core/errors.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/parallel.h"
#include "u3d/core/text.h"
#include "u3d/io/import.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;

struct TiffCase {
  std::string id;
  fs::path image;
  std::optional<fs::path> label;
};

// <stem> -> file for every *.tif / *.tiff (any case) in `dir`; hidden files are skipped. DataError for a
// missing folder, two files of one stem, or a stem that is not a valid case id.
std::map<std::string, fs::path> tiff_files_in(const fs::path& dir) {
  const auto out = import_detail::files_by_stem(
      dir,
      [](const fs::path& p) {
        const std::string ext = to_lower(p.extension().string());
        return ext == ".tif" || ext == ".tiff";
      },
      [](const std::string& id) { return fmt::format("two volumes of case '{}'", id); });
  for (const auto& [id, path] : out) {
    if (!is_valid_case_id(id)) {
      throw DataError(
          fmt::format("{}: case id '{}' may hold only letters, digits, '_', '-' and '.'", path.string(), id));
    }
  }
  return out;
}

// The cases: images paired with labels by name; every file without a partner in one error.
std::vector<TiffCase> pair_cases(const TiffImportOptions& o) {
  const auto images = tiff_files_in(o.images);
  if (images.empty()) throw DataError(fmt::format("{}: no TIFF volumes (*.tif, *.tiff)", o.images.string()));
  std::vector<TiffCase> cases;
  if (o.labels.empty()) {
    for (const auto& [id, path] : images) cases.push_back({id, path, std::nullopt});
    return cases;
  }
  const auto labels = tiff_files_in(o.labels);
  std::vector<std::string> unmatched;
  for (const auto& [id, path] : images) {
    const auto l = labels.find(id);
    if (l == labels.end()) {
      unmatched.push_back(fmt::format("{} (no label)", path.string()));
    } else {
      cases.push_back({id, path, l->second});
    }
  }
  for (const auto& [id, path] : labels) {
    if (!images.count(id)) unmatched.push_back(fmt::format("{} (no image)", path.string()));
  }
  if (!unmatched.empty()) {
    throw DataError(fmt::format("{} unmatched file(s), images and labels are paired by name: {}", unmatched.size(),
                                fmt::join(unmatched, ", ")));
  }
  return cases;
}

void check_options(const TiffImportOptions& o) {
  if (o.ignore_label != -1 && (o.ignore_label < 2 || o.ignore_label > 255)) {
    throw UsageError(
        fmt::format("--ignore-label {}: expected 2..255 (above background 0 and the first class 1) or -1 for none",
                    o.ignore_label));
  }
  if (std::any_of(o.spacing.begin(), o.spacing.end(), [](double s) { return !(s > 0) || !std::isfinite(s); })) {
    throw UsageError(fmt::format("--spacing {},{},{}: expected positive voxel sizes in mm", o.spacing[0], o.spacing[1],
                                 o.spacing[2]));
  }
  if (!(o.val_fraction >= 0 && o.val_fraction < 1)) {
    throw UsageError(fmt::format("--val-fraction {}: expected a value in [0, 1)", o.val_fraction));
  }
}

// The smallest exact storage type of an image: uint8 as it is, integers that fit int16 as int16.
torch::Tensor storage_image(torch::Tensor v, const fs::path& file) {
  if (v.is_floating_point()) {
    const int64_t bad = (~torch::isfinite(v)).sum().item<int64_t>();
    if (bad > 0) throw DataError(fmt::format("{}: holds {} NaN or Inf voxels", file.string(), bad));
    return v;
  }
  if (v.scalar_type() == torch::kUInt8 || v.scalar_type() == torch::kInt16) return v;
  const bool fits_int16 = v.min().item<int64_t>() >= INT16_MIN && v.max().item<int64_t>() <= INT16_MAX;
  return fits_int16 ? v.to(torch::kInt16) : v;
}

CaseData load_case(const TiffCase& tc, const TiffImportOptions& o) {
  CaseData c;
  c.id = tc.id;
  c.spacing = o.spacing;
  c.image = storage_image(read_tiff_volume(tc.image), tc.image).unsqueeze(0).contiguous();  // (1, D, H, W)
  // The source grid, so that --predict-only writes the case's prediction back as <id>.tif (prediction_output.h).
  c.source = plain_geometry({c.image.size(1), c.image.size(2), c.image.size(3)}, o.spacing);
  c.source->format = "tiff";
  c.source->file_ending = tc.image.extension().string();
  c.source->files = {fs::absolute(tc.image).string()};
  if (tc.label) c.source->files.push_back(fs::absolute(*tc.label).string());
  if (tc.label) {
    torch::Tensor labels = read_tiff_volume(*tc.label);
    if (labels.sizes() != c.image.sizes().slice(1)) {
      throw DataError(fmt::format("{}: case '{}': the label volume is {} (D x H x W) but the image {} is {}",
                                  tc.label->string(), tc.id, fmt::join(labels.sizes(), "x"), tc.image.string(),
                                  fmt::join(c.image.sizes().slice(1), "x")));
    }
    c.target = labels.to(torch::kUInt8).contiguous();  // values checked by import_tiff's first pass
  }
  return c;
}

}  // namespace

ImportSummary import_tiff(const TiffImportOptions& o, const fs::path& out) {
  const auto t0 = std::chrono::steady_clock::now();
  check_options(o);
  const std::vector<TiffCase> cases = pair_cases(o);
  for (const auto& c : cases) refuse_output_over_input("import tiff", "--out", out, {c.image, c.label.value_or("")});
  const int64_t n = static_cast<int64_t>(cases.size());
  const int64_t threads = resolve_threads(o.threads);
  const bool labelled = !o.labels.empty();

  DatasetInfo info;
  info.task = Task::kSegmentation;
  info.channel_names = {"image"};
  info.target_name = "labels";
  info.ignore_label = o.ignore_label;
  info.description = fmt::format("imported from TIFF folder {}", fs::absolute(o.images).string());
  // Classes: the largest label value found other than the ignore label (labels only, in parallel).
  int64_t top = 1;
  if (labelled) {
    std::vector<std::vector<int64_t>> found(cases.size());
    parallel_for(n, threads, [&](int64_t i) {
      const fs::path& f = *cases[static_cast<size_t>(i)].label;
      found[static_cast<size_t>(i)] = import_detail::label_values(read_tiff_volume(f), f);
    });
    for (size_t i = 0; i < found.size(); ++i) {
      for (const int64_t v : found[i]) {
        if (o.ignore_label >= 0 && v > o.ignore_label) {
          throw DataError(
              fmt::format("{}: holds the label value {} above the ignore label {}; the ignore label must "
                          "be the highest value",
                          cases[i].label->string(), v, o.ignore_label));
        }
        if (v != o.ignore_label) top = std::max(top, v);
      }
    }
  }
  if (!labelled && o.classes > 0) top = o.classes - 1;
  info.num_classes = top + 1;
  for (int64_t k = 0; k < info.num_classes; ++k) {
    info.class_names.push_back(k == 0 ? "background" : fmt::format("class_{}", k));
  }
  if (o.ignore_label >= 0 && o.ignore_label < info.num_classes) {  // only without labels: 2 classes assumed
    throw UsageError(fmt::format("--ignore-label {}: expected a label above the {} classes 0..{}", o.ignore_label,
                                 info.num_classes, info.num_classes - 1));
  }

  DatasetWriteOptions wo;
  wo.compression_level = o.compression_level;
  DatasetWriter writer(out, info, wo);
  import_detail::ImportProgress progress(n);
  // Cases are read and compressed in parallel (at most `threads` ahead) and stored in name order on
  // this thread: the file does not depend on the thread count.
  ordered_pipeline(
      n, threads, /*window=*/threads,
      [&](int64_t i) { return writer.prepare(load_case(cases[static_cast<size_t>(i)], o)); },
      [&](int64_t i, std::shared_ptr<const PreparedCase> c) {
        writer.write_case(*c);
        progress.written(i);
      });
  ImportSummary summary;
  summary.channel_normalization = {"zscore"};
  std::vector<std::string> ids;
  for (const auto& c : cases) ids.push_back(c.id);
  import_detail::commit_import(writer,
                               labelled ? import_detail::labelled_splits(ids, {}, o.val_fraction, o.seed)
                                        : import_detail::labelled_splits({}, ids, o.val_fraction, o.seed),
                               summary.channel_normalization, summary);
  spdlog::info("import: wrote {} from {}: {} train / {} val / {} test cases, {} classes{} in {:.1f} s", out.string(),
               o.images.string(), summary.train, summary.val, summary.test, info.num_classes,
               o.ignore_label >= 0 ? fmt::format(" and ignore label {}", o.ignore_label) : std::string(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return summary;
}

}  // namespace u3d
