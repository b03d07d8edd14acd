#include "u3d/io/import.h"

#include "import_layout.h"

#include <spdlog/spdlog.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <map>
#include <mutex>

#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/finite.h"
#include "u3d/core/intensity_sample.h"
#include "u3d/core/normalize_spec.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/parallel.h"
#include "u3d/io/nifti/nifti.h"

namespace u3d {
namespace {

namespace fs = std::filesystem;
using import_detail::CaseFiles;
using import_detail::label_values;
using import_detail::Layout;

struct ImportedCase {
  CaseData data;
  std::vector<WeightedValues> foreground;  // per channel: raw foreground intensities (core/intensity_sample.h)
  bool resampled = false;
};

// NIfTI order (i x j x k) for messages: what nibabel or ITK-SNAP show.
std::string dims_text(const Shape3& s) { return fmt::format("{}x{}x{}", s[2], s[1], s[0]); }
std::string spacing_text(const std::array<double, 3>& s) { return fmt::format("{:g}x{:g}x{:g} mm", s[2], s[1], s[0]); }

// The same voxel grid: shape, spacing and affine (orientation and origin).
void check_same_grid(const SourceGeometry& g, const SourceGeometry& ref, const fs::path& file,
                     const fs::path& ref_file) {
  if (g.shape != ref.shape) {
    throw DataError(fmt::format("{}: dims {} differ from {} of {}; a case's channels and label must share one grid",
                                file.string(), dims_text(g.shape), dims_text(ref.shape), ref_file.string()));
  }
  for (int a = 0; a < 3; ++a) {
    if (std::abs(g.spacing[a] - ref.spacing[a]) > 1e-4 * std::max(1.0, std::abs(ref.spacing[a]))) {
      throw DataError(fmt::format("{}: voxel size {} differs from {} of {}", file.string(), spacing_text(g.spacing),
                                  spacing_text(ref.spacing), ref_file.string()));
    }
  }
  for (size_t i = 0; i < 12; ++i) {
    if (std::abs(g.affine[i] - ref.affine[i]) > 1e-3) {
      throw DataError(
          fmt::format("{}: orientation or origin (affine) differs from that of {}", file.string(), ref_file.string()));
    }
  }
}

Shape3 resampled_shape(const Shape3& shape, const std::array<double, 3>& spacing, const std::array<double, 3>& target) {
  Shape3 out{};
  for (int a = 0; a < 3; ++a) {
    out[a] = std::max<int64_t>(1, std::llround(static_cast<double>(shape[a]) * spacing[a] / target[a]));
  }
  return out;
}

// foreground_draws: nnU-Net's draws per case (core/intensity_sample.h) of the label's foreground, for
// each channel in `sampled` (the CT channels, for their statistics), at the native resolution.
ImportedCase load_case(const CaseFiles& cf, const Layout& layout, const NiftiImportOptions& o, int64_t foreground_draws,
                       const std::vector<bool>& sampled) {
  std::vector<NiftiVolume> ch;
  for (size_t i = 0; i < cf.channels.size(); ++i) {
    ch.push_back(read_nifti(cf.channels[i]));
    check_finite(ch.back().data, cf.channels[i].string() + ":");
    if (i > 0) check_same_grid(ch[i].geometry, ch[0].geometry, cf.channels[i], cf.channels[0]);
  }
  const bool small_ints = std::all_of(ch.begin(), ch.end(), [](const NiftiVolume& v) {
    const auto t = v.data.scalar_type();
    return t == torch::kUInt8 || t == torch::kInt8 || t == torch::kInt16;
  });
  std::vector<torch::Tensor> planes;
  for (auto& v : ch) planes.push_back(v.data.to(small_ints ? torch::kInt16 : torch::kFloat));
  ImportedCase out;
  CaseData& c = out.data;
  c.id = cf.id;
  c.image = torch::stack(planes);  // (C, D, H, W): int16 (exact) or float32
  planes.clear();
  c.spacing = ch[0].geometry.spacing;
  SourceGeometry source = ch[0].geometry;
  source.files.clear();
  for (const auto& p : cf.channels) source.files.push_back(fs::absolute(p).string());
  ch.clear();

  if (cf.label) {
    NiftiVolume lv = read_nifti(*cf.label);
    check_same_grid(lv.geometry, source, *cf.label, cf.channels[0]);
    const auto present = label_values(lv.data, *cf.label);
    if (!layout.declared.empty()) {
      std::vector<int64_t> undeclared;
      for (int64_t v : present) {
        if (!layout.declared.count(v)) undeclared.push_back(v);
      }
      if (!undeclared.empty()) {
        throw DataError(fmt::format("{}: label values {} are not declared (declared: {})", cf.label->string(),
                                    fmt::join(undeclared, ", "), fmt::join(layout.declared, ", ")));
      }
    }
    c.target = lv.data.to(torch::kUInt8).contiguous();  // (D, H, W)
    source.files.push_back(fs::absolute(*cf.label).string());
    // Foreground intensities for the CT statistics, nnU-Net's rule (core/intensity_sample.h).
    torch::Tensor is_fg = c.target.flatten() > 0;
    if (layout.info.ignore_label >= 0) is_fg &= c.target.flatten() != layout.info.ignore_label;  // unlabeled
    const torch::Tensor fg = is_fg.nonzero().flatten();
    out.foreground.resize(static_cast<size_t>(c.image.size(0)));
    if (fg.size(0) > 0 && foreground_draws > 0) {
      const SamplePick pick = foreground_pick(fg.size(0), foreground_draws, cf.id);
      const torch::Tensor idx = fg.index_select(0, torch::tensor(pick.positions, torch::kLong));
      for (int64_t k = 0; k < c.image.size(0); ++k) {
        if (!sampled[static_cast<size_t>(k)]) continue;
        const torch::Tensor v = c.image[k].flatten().index_select(0, idx).to(torch::kFloat).contiguous();
        out.foreground[static_cast<size_t>(k)] = {{v.data_ptr<float>(), v.data_ptr<float>() + v.numel()}, pick.weight};
      }
    }
  }
  if (o.spacing) {
    const Shape3 shape = {c.image.size(1), c.image.size(2), c.image.size(3)};
    const Shape3 target = resampled_shape(shape, c.spacing, *o.spacing);
    if (target != shape) {
      namespace F = torch::nn::functional;
      const std::vector<int64_t> size = {target[0], target[1], target[2]};
      c.image = F::interpolate(c.image.to(torch::kFloat).unsqueeze(0),
                               F::InterpolateFuncOptions().size(size).mode(torch::kTrilinear).align_corners(false))[0]
                    .contiguous();
      if (c.target.defined()) {
        // Nearest neighbour at the voxel centres (F.interpolate mode nearest-exact): output voxel o
        // takes input voxel floor((o + 0.5) * in / out).
        torch::Tensor t = c.target;
        for (int a = 0; a < 3; ++a) {
          const double scale = static_cast<double>(t.size(a)) / static_cast<double>(target[a]);
          const auto src = ((torch::arange(target[a], torch::kDouble) + 0.5) * scale).floor().clamp_max(t.size(a) - 1);
          t = t.index_select(a, src.to(torch::kLong));
        }
        c.target = t.contiguous();
      }
      out.resampled = true;
    }
    c.spacing = *o.spacing;
  }
  c.source = std::move(source);
  return out;
}

std::vector<std::string> normalization_specs(const NiftiImportOptions& o,
                                             const std::vector<std::string>& channel_names) {
  const size_t n = channel_names.size();
  if (!o.normalization.empty() && o.normalization.size() != 1 && o.normalization.size() != n) {
    throw UsageError(fmt::format("--normalize: {} entries for {} channels; give one (all) or one per channel",
                                 o.normalization.size(), n));
  }
  std::vector<std::string> out;
  for (size_t i = 0; i < n; ++i) {
    std::string spec = o.normalization.empty() ? normalization_for_channel_name(channel_names[i])
                                               : o.normalization[o.normalization.size() == 1 ? 0 : i];
    if (spec == "dataset") throw UsageError("--normalize: 'dataset' is what training reads; give ct, zscore, ...");
    if (spec != "ct") {
      try {
        parse_channel_norm(spec);
      } catch (const ConfigError&) {
        throw UsageError(fmt::format("--normalize: '{}' is not one of ct|zscore|minmax|none|clip:LO:HI|scale:S", spec));
      }
    }
    out.push_back(spec);
  }
  return out;
}

// --spacing: each case is resampled in memory (float32 image, input and output at once); refuse a
// spacing whose largest case, times the cases loaded at once, cannot fit in the memory available,
// from the headers alone, before anything is allocated or written (it used to end in LibTorch's
// allocator error naming no setting).
void check_resampled_memory(const std::vector<CaseFiles>& cases, const std::array<double, 3>& spacing, size_t channels,
                            int64_t at_once) {
  const int64_t available = host_available_bytes();
  if (available <= 0 || cases.empty()) return;
  double worst = 0;
  const CaseFiles* worst_case = nullptr;
  Shape3 worst_shape{};
  for (const auto& cf : cases) {
    const SourceGeometry g = read_nifti_geometry(cf.channels.front());
    const Shape3 target = resampled_shape(g.shape, g.spacing, spacing);
    const double voxels =
        static_cast<double>(target[0]) * static_cast<double>(target[1]) * static_cast<double>(target[2]);
    const double source =
        static_cast<double>(g.shape[0]) * static_cast<double>(g.shape[1]) * static_cast<double>(g.shape[2]);
    const double bytes = 4.0 * static_cast<double>(channels) * (voxels + source) + (cf.label ? voxels : 0.0);
    if (bytes > worst) {
      worst = bytes;
      worst_case = &cf;
      worst_shape = target;
    }
  }
  if (worst * static_cast<double>(at_once) > static_cast<double>(available)) {
    throw UsageError(
        fmt::format("--spacing {}: case '{}' would become {}x{}x{} voxels, {} to resample{}, more than the "
                    "{} of memory available; choose a coarser spacing{}",
                    spacing_text(spacing), worst_case->id, worst_shape[2], worst_shape[1], worst_shape[0],
                    human_bytes(worst), at_once > 1 ? fmt::format(" ({} cases at once)", at_once) : "",
                    human_bytes(static_cast<double>(available)), at_once > 1 ? " or fewer --threads" : ""));
  }
}

ImportSummary run_import(Layout layout, const fs::path& out, const NiftiImportOptions& o, const std::string& what) {
  const auto t0 = std::chrono::steady_clock::now();
  const int64_t threads = resolve_threads(o.threads);
  if (layout.labelled.empty() && layout.unlabelled.empty()) throw DataError(fmt::format("{}: no cases found", what));
  const auto specs = normalization_specs(o, layout.info.channel_names);
  const size_t channels = layout.info.channel_names.size();

  // Without declared classes: find the label values first (labels only, in parallel).
  if (layout.declared.empty()) {
    std::vector<std::vector<int64_t>> found(layout.labelled.size());
    parallel_for(static_cast<int64_t>(layout.labelled.size()), threads, [&](int64_t i) {
      const auto& f = *layout.labelled[static_cast<size_t>(i)].label;
      found[static_cast<size_t>(i)] = label_values(read_nifti(f).data, f);
    });
    int64_t hi = 1;
    for (const auto& v : found) hi = std::max(hi, v.empty() ? 0 : v.back());
    layout.info.num_classes = hi + 1;
    layout.info.class_names.clear();
    for (int64_t k = 0; k <= hi; ++k) {
      layout.info.class_names.push_back(k == 0 ? "background" : fmt::format("class_{}", k));
      layout.declared.insert(k);
    }
  }

  std::vector<CaseFiles> all = layout.labelled;
  all.insert(all.end(), layout.unlabelled.begin(), layout.unlabelled.end());
  for (const auto& c : all) {  // --force replaces an earlier dataset, never a file read here
    refuse_output_over_input("import", "--out", out, c.channels);
    if (c.label) refuse_output_over_input("import", "--out", out, {*c.label});
  }
  const int64_t n = static_cast<int64_t>(all.size());
  const int64_t fg_draws = foreground_draws_per_case(static_cast<int64_t>(layout.labelled.size()));
  std::vector<bool> ct_channels;
  for (const auto& spec : specs) ct_channels.push_back(spec == "ct");
  const bool need_fg = std::find(specs.begin(), specs.end(), "ct") != specs.end();

  if (o.spacing) check_resampled_memory(all, *o.spacing, channels, std::min(threads, n));

  DatasetWriteOptions wo;
  wo.compression_level = o.compression_level;
  DatasetWriter writer(out, layout.info, wo);
  ImportSummary summary;
  std::vector<std::vector<WeightedValues>> foreground(channels);  // per channel, per labelled case
  import_detail::ImportProgress progress(n);
  // Cases load in parallel (at most `threads` ahead) and are written in case order on this thread:
  // the file does not depend on the thread count.
  ordered_pipeline(
      n, threads, /*window=*/threads,
      [&](int64_t i) {
        // Test cases (imagesTs, even with labelsTs) never feed the CT statistics: a model's inputs are
        // normalised with what its training cases show.
        const bool trains = i < static_cast<int64_t>(layout.labelled.size());
        return load_case(all[static_cast<size_t>(i)], layout, o, need_fg && trains ? fg_draws : 0, ct_channels);
      },
      [&](int64_t i, ImportedCase lc) {
        writer.write_case(lc.data);
        summary.resampled += lc.resampled ? 1 : 0;
        for (size_t k = 0; k < lc.foreground.size(); ++k) {
          if (!lc.foreground[k].values.empty()) foreground[k].push_back(std::move(lc.foreground[k]));
        }
        progress.written(i);
      });

  // Channel normalisation recorded for data.normalize = dataset.
  for (size_t k = 0; k < channels; ++k) {
    std::string spec = specs[k];
    if (spec == "ct") {
      auto& v = foreground[k];
      if (v.empty()) {
        spdlog::warn(
            "import: channel '{}': no labelled foreground to take CT statistics from; recording zscore "
            "(a checkpoint's statistics still apply at prediction)",
            layout.info.channel_names[k]);
        spec = "zscore";
      } else {
        const IntensityStats st = weighted_intensity_stats(v);
        spec = fmt::format("ct:{}:{}:{}:{}", st.p00_5, std::max(st.p99_5, st.p00_5 + 1e-3), st.mean,
                           std::max(st.std, 1e-6));
      }
    }
    summary.channel_normalization.push_back(spec);
  }
  std::vector<std::string> labelled_ids, unlabelled_ids;
  for (const auto& c : layout.labelled) labelled_ids.push_back(c.id);
  for (const auto& c : layout.unlabelled) unlabelled_ids.push_back(c.id);
  import_detail::commit_import(writer,
                               import_detail::labelled_splits(labelled_ids, unlabelled_ids, o.val_fraction, o.seed),
                               summary.channel_normalization, summary);
  spdlog::info(
      "import: wrote {} from {}: {} train / {} val / {} test cases, {} channels [{}], {} classes, "
      "normalisation [{}]{} in {:.1f} s",
      out.string(), what, summary.train, summary.val, summary.test, channels,
      fmt::join(layout.info.channel_names, ", "), layout.info.num_classes,
      fmt::join(summary.channel_normalization, ", "),
      o.spacing ? fmt::format(", resampled to {}", spacing_text(*o.spacing)) : std::string(),
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return summary;
}

}  // namespace

ImportSummary import_nnunet(const fs::path& source, const fs::path& out, const NiftiImportOptions& options) {
  return run_import(import_detail::nnunet_layout(source), out, options, source.string());
}

ImportSummary import_nifti_folders(const NiftiFolders& folders, const fs::path& out,
                                   const NiftiImportOptions& options) {
  return run_import(import_detail::nifti_folders_layout(folders), out, options, folders.images.string());
}

}  // namespace u3d
