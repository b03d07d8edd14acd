#include "u3d/predict/prediction_output.h"

#include <array>
#include <cmath>

#include "u3d/core/errors.h"
#include "u3d/core/signals.h"
#include "u3d/core/staged_folder.h"
#include "u3d/evaluate/metrics.h"
#include "u3d/io/dicom/dicom_write.h"
#include "u3d/io/h5/h5.h"
#include "u3d/io/images/image2d.h"
#include "u3d/io/nifti/nifti.h"
#include "u3d/io/tiff/tiff.h"

namespace u3d {

ResamplingSink::ResamplingSink(const Shape3& in_shape, const Shape3& out_shape, SlabSink& downstream)
    : in_(in_shape), out_(out_shape), downstream_(downstream) {}

void ResamplingSink::consume(int64_t d0, const torch::Tensor& slab) {
  // In-plane first: (K, d, H, W) -> (d, K, H, W) -> bilinear -> (d, K, H_out, W_out).
  torch::Tensor planes = slab.to(torch::kFloat).permute({1, 0, 2, 3});
  if (in_[1] != out_[1] || in_[2] != out_[2]) {
    planes = torch::nn::functional::interpolate(planes, torch::nn::functional::InterpolateFuncOptions()
                                                            .size(std::vector<int64_t>{out_[1], out_[2]})
                                                            .mode(torch::kBilinear)
                                                            .align_corners(false));
  }
  for (int64_t r = 0; r < planes.size(0); ++r) rows_[d0 + r] = planes[r];
  // Along D: output row o samples input position max(0, (o + 0.5) * in / out - 0.5).
  const double scale = static_cast<double>(in_[0]) / static_cast<double>(out_[0]);
  std::vector<torch::Tensor> ready;
  const int64_t first = next_out_;
  while (next_out_ < out_[0]) {
    const double src = std::max(0.0, (static_cast<double>(next_out_) + 0.5) * scale - 0.5);
    const int64_t i0 = std::min<int64_t>(static_cast<int64_t>(std::floor(src)), in_[0] - 1);
    const int64_t i1 = std::min<int64_t>(i0 + 1, in_[0] - 1);
    const auto a = rows_.find(i0);
    const auto b = rows_.find(i1);
    if (a == rows_.end() || b == rows_.end()) break;
    const double w = src - static_cast<double>(i0);
    ready.push_back(w == 0 ? a->second : a->second * (1.0 - w) + b->second * w);  // (K, H_out, W_out)
    ++next_out_;
    // Rows before the one the next output starts from are no longer needed.
    const double next_src = std::max(0.0, (static_cast<double>(next_out_) + 0.5) * scale - 0.5);
    const int64_t keep_from = std::min<int64_t>(static_cast<int64_t>(std::floor(next_src)), in_[0] - 1);
    rows_.erase(rows_.begin(), rows_.lower_bound(keep_from));
  }
  if (!ready.empty()) downstream_.consume(first, torch::stack(ready, /*dim=*/1));  // (K, m, H_out, W_out)
}

void ResamplingSink::finish() const {
  if (next_out_ != out_[0]) {
    throw IoError(fmt::format("resampling: {} of {} output rows produced", next_out_, out_[0]));
  }
}

// ---------------------------------------------------------------------------------------------
namespace {

// Network output slab (K, d, H, W) -> the task's prediction (d, H, W): uint8 labels (before any
// component removal) or float32 values in target units.
torch::Tensor finalize_slab(const torch::Tensor& slab, const Preprocessor& pre, const PostprocessOptions& post) {
  if (pre.task() == Task::kSegmentation) return labels_from_output(slab, post);
  return pre.restore_target(slab[0]).to(torch::kFloat);
}

// The case's file in its source's format: NIfTI streamed slab by slab, the others (TIFF, PNG slices,
// DICOM-RT: their writers take a volume at once) held and written whole; each lands in place only at
// commit().
class SourceFile {
 public:
  virtual ~SourceFile() = default;
  virtual void write_slab(const torch::Tensor& slab) = 0;  // the next rows along D, (d, H, W)
  virtual void commit() = 0;
};

class NiftiSourceFile : public SourceFile {
 public:
  NiftiSourceFile(const std::filesystem::path& path, const SourceGeometry& g, torch::ScalarType dtype,
                  const std::string& description)
      : writer_(path, g, dtype, description) {}
  void write_slab(const torch::Tensor& slab) override { writer_.write_slab(slab); }
  void commit() override { writer_.commit(); }

 private:
  NiftiWriter writer_;
};

// A file written whole at commit() (TIFF, slices, DICOM-RT): the slabs held in `dtype`, then
// write_whole() on the (D, H, W) volume once every row came.
class WholeVolumeFile : public SourceFile {
 public:
  WholeVolumeFile(std::filesystem::path path, const SourceGeometry& g, torch::ScalarType dtype)
      : path_(std::move(path)), g_(g), dtype_(dtype) {}
  void write_slab(const torch::Tensor& slab) final { slabs_.push_back(slab.to(dtype_)); }
  void commit() final {
    const torch::Tensor v = slabs_.empty() ? torch::empty({0}) : torch::cat(slabs_, /*dim=*/0);
    if (v.dim() != 3 || Shape3{v.size(0), v.size(1), v.size(2)} != g_.shape) {
      throw IoError(
          fmt::format("{}: {} of {} rows produced", path_.string(), v.dim() == 3 ? v.size(0) : 0, g_.shape[0]));
    }
    write_whole(v);
    slabs_.clear();
  }

 protected:
  virtual void write_whole(const torch::Tensor& v) = 0;
  const std::filesystem::path& path() const { return path_; }
  const SourceGeometry& geometry() const { return g_; }

 private:
  std::filesystem::path path_;
  SourceGeometry g_;
  torch::ScalarType dtype_;
  std::vector<torch::Tensor> slabs_;
};

class TiffSourceFile : public WholeVolumeFile {
 public:
  using WholeVolumeFile::WholeVolumeFile;

 protected:
  void write_whole(const torch::Tensor& v) override { write_tiff_volume(path(), v); }  // staged, renamed
};

// A case imported from 2D slices (io/images/image2d_import.h): the volume <case>.tif as for TIFF, and one
// 8-bit PNG per slice, <image stem>_mask.png, in the folder <case>/ beside it (0/255 for a binary
// task, else the label values), the folder staged and renamed into place.
class SlicesSourceFile : public WholeVolumeFile {
 public:
  SlicesSourceFile(const std::filesystem::path& path, const SourceGeometry& g, bool binary)
      : WholeVolumeFile(path, g, torch::kUInt8), folder_(path.parent_path() / path.stem()), binary_(binary) {
    for (int64_t k = 0; k < g.shape[0] && k < static_cast<int64_t>(g.files.size()); ++k) {
      stems_.push_back(std::filesystem::path(g.files[static_cast<size_t>(k)]).stem().string());
    }
    if (static_cast<int64_t>(stems_.size()) != g.shape[0]) {
      throw IoError(
          fmt::format("{}: the case records {} slice files for {} slices", path.string(), stems_.size(), g.shape[0]));
    }
  }

 protected:
  void write_whole(const torch::Tensor& v) override {
    write_tiff_volume(path(), v);
    StagedFolder folder(folder_);
    for (int64_t k = 0; k < v.size(0); ++k) {
      const torch::Tensor mask = binary_ ? (v[k] > 0).to(torch::kUInt8) * 255 : v[k];
      write_png_gray8(folder.path() / (stems_[static_cast<size_t>(k)] + "_mask.png"), mask.contiguous());
    }
    folder.commit();
  }

 private:
  std::filesystem::path folder_;
  bool binary_;
  std::vector<std::string> stems_;
};

// A case imported from DICOM: <case>.dcm on the source series (io/dicom/dicom_write.h), an RT Dose for a
// dose (float32), an RT Structure Set of classes 1..K-1 (`names`) for labels (uint8).
class DicomRtSourceFile : public WholeVolumeFile {
 public:
  DicomRtSourceFile(std::filesystem::path path, const SourceGeometry& g, torch::ScalarType dtype,
                    std::string description, std::vector<std::string> names)
      : WholeVolumeFile(std::move(path), g, dtype), description_(std::move(description)), names_(std::move(names)) {}

 protected:
  void write_whole(const torch::Tensor& v) override {
    if (v.scalar_type() == torch::kUInt8) {
      write_rtstruct(path(), v, geometry(), names_, description_);
    } else {
      write_rtdose(path(), v, geometry(), description_);
    }
  }

 private:
  std::string description_;
  std::vector<std::string> names_;
};

// The output formats, one row each: SourceGeometry::format (what the importer recorded), whether
// the format needs the source's files (DICOM-RT: an RT Dose or RT Structure Set on the source
// series), and its writer.
struct SourceFormat {
  const char* name;
  bool needs_source_files;
  std::unique_ptr<SourceFile> (*open)(const std::filesystem::path& path, const SourceGeometry& g,
                                      torch::ScalarType dtype, const CaseOutputOptions& o, bool binary);
};
const std::array<SourceFormat, 4> kSourceFormats = {{
    {"nifti", false,
     [](const auto& path, const auto& g, auto dtype, const auto& o, bool) -> std::unique_ptr<SourceFile> {
       return std::make_unique<NiftiSourceFile>(path, g, dtype, o.description);
     }},
    {"tiff", false,
     [](const auto& path, const auto& g, auto dtype, const auto&, bool) -> std::unique_ptr<SourceFile> {
       return std::make_unique<TiffSourceFile>(path, g, dtype);
     }},
    {"slices", false,
     [](const auto& path, const auto& g, auto, const auto&, bool binary) -> std::unique_ptr<SourceFile> {
       return std::make_unique<SlicesSourceFile>(path, g, binary);
     }},
    {"dicom", true,
     [](const auto& path, const auto& g, auto dtype, const auto& o, bool) -> std::unique_ptr<SourceFile> {
       return std::make_unique<DicomRtSourceFile>(path, g, dtype, o.description, o.class_names);
     }},
}};

const SourceFormat* source_format(const SourceGeometry& g) {
  for (const auto& f : kSourceFormats) {
    if (g.format == f.name) return &f;
  }
  return nullptr;
}

std::unique_ptr<SourceFile> open_source_file(const std::filesystem::path& path, const SourceGeometry& g,
                                             torch::ScalarType dtype, const CaseOutputOptions& o, bool binary) {
  return source_format(g)->open(path, g, dtype, o, binary);  // writes_source_file(g) held
}

// Finalises resampled slabs into the source-format file; with component removal they are held until finish().
class SourceSlabSink : public SlabSink {
 public:
  SourceSlabSink(SourceFile& writer, const Preprocessor& pre, const PostprocessOptions& post)
      : writer_(writer),
        pre_(pre),
        post_(post),
        whole_(pre.task() == Task::kSegmentation && post.needs_whole_volume()) {}
  void consume(int64_t, const torch::Tensor& slab) override {
    const torch::Tensor pred = finalize_slab(slab, pre_, post_).cpu();
    if (whole_) {
      held_.push_back(pred);
    } else {
      writer_.write_slab(pred);
    }
  }
  void finish() {
    if (whole_ && !held_.empty()) {
      writer_.write_slab(remove_small_components(torch::cat(held_, /*dim=*/0), post_.min_component_size));
    }
    held_.clear();
  }

 private:
  SourceFile& writer_;
  const Preprocessor& pre_;
  const PostprocessOptions& post_;
  bool whole_;
  std::vector<torch::Tensor> held_;  // whole_: the slabs, in order
};

}  // namespace

bool writes_source_file(const SourceGeometry& g) {
  const SourceFormat* f = source_format(g);
  return f != nullptr && (!f->needs_source_files || !g.files.empty());
}

struct CaseOutputSink::Impl {
  const CachedCase& c;
  const Preprocessor& pre;
  CaseOutputOptions o;
  double train_mean;
  Shape3 shape;
  bool seg;
  bool whole = false;               // component removal: labels are held until finish()
  std::vector<torch::Tensor> held;  // whole: the label slabs, in order
  std::unique_ptr<h5::SlabWriter> prediction, probabilities;
  std::unique_ptr<SourceFile> source_file;
  std::unique_ptr<SourceSlabSink> source_sink;
  std::unique_ptr<ResamplingSink> resampler;
  // Scores: per class intersection, predicted and true voxels (segmentation); error sums (regression).
  std::vector<double> inter, predicted, truth;
  double err = 0, base_err = 0, count = 0;
  std::vector<torch::Tensor> kept;  // keep_prediction: the finalized slabs, in order

  Impl(const CachedCase& cc, const Preprocessor& p, CaseOutputOptions opts, double mean)
      : c(cc), pre(p), o(std::move(opts)), train_mean(mean) {}
  // The final prediction of rows [d0, d0 + d): written, kept, scored and, without resampling, into the NIfTI file.
  void record(int64_t d0, const torch::Tensor& pred);
};

void CaseOutputSink::Impl::record(int64_t d0, const torch::Tensor& pred) {
  const int64_t d = pred.size(0);
  prediction->write(pred);
  if (o.keep_prediction) kept.push_back(pred);
  if (seg && c.target.defined()) {
    const torch::Tensor y = c.target.narrow(0, d0, d);  // (d, H, W) uint8
    // A label above the classes is the dataset's ignore label (dataset.h): those voxels count for none.
    const torch::Tensor scored = y < pre.out_channels();
    for (int64_t k = 1; k < pre.out_channels(); ++k) {
      const auto p = (pred == k) & scored;
      const auto t = y == k;
      inter[static_cast<size_t>(k)] += static_cast<double>((p & t).sum().item<int64_t>());
      predicted[static_cast<size_t>(k)] += static_cast<double>(p.sum().item<int64_t>());
      truth[static_cast<size_t>(k)] += static_cast<double>(t.sum().item<int64_t>());
    }
  } else if (!seg && c.raw_target.defined()) {
    const torch::Tensor y = c.raw_target.narrow(0, d0, d).to(torch::kDouble);  // target units
    torch::Tensor w = c.mask.defined() ? c.mask[0].narrow(0, d0, d).to(torch::kDouble) : torch::ones_like(y);
    err += ((pred.to(torch::kDouble) - y).abs() * w).sum().item<double>();
    base_err += ((y - train_mean).abs() * w).sum().item<double>();
    count += w.sum().item<double>();
  }
  if (source_file && !resampler) source_file->write_slab(pred);
}

CaseOutputSink::CaseOutputSink(const CachedCase& c, const Preprocessor& pre, CaseOutputOptions options,
                               double train_mean)
    : impl_(std::make_unique<Impl>(c, pre, std::move(options), train_mean)) {
  Impl& m = *impl_;
  m.shape = {c.image.size(1), c.image.size(2), c.image.size(3)};
  m.seg = pre.task() == Task::kSegmentation;
  m.whole = m.seg && m.o.postprocess.needs_whole_volume();
  const hid_t file = static_cast<hid_t>(m.o.file);
  const std::vector<int64_t> spatial = {m.shape[0], m.shape[1], m.shape[2]};
  m.prediction =
      std::make_unique<h5::SlabWriter>(file, m.o.group + "/prediction", m.seg ? torch::kUInt8 : torch::kFloat, spatial,
                                       /*axis=*/0, std::vector<int64_t>{16, 64, 64},
                                       /*compression_level=*/4, m.o.context);
  if (m.o.probabilities && m.seg) {
    const int64_t k = m.o.postprocess.head == Head::kSigmoid ? pre.out_channels() - 1 : pre.out_channels();
    m.probabilities = std::make_unique<h5::SlabWriter>(
        file, m.o.group + "/probabilities", torch::kFloat, std::vector<int64_t>{k, m.shape[0], m.shape[1], m.shape[2]},
        /*axis=*/1, std::vector<int64_t>{1, 16, 64, 64}, /*compression_level=*/4, m.o.context);
  }
  if (m.o.source_file) {
    if (!m.o.geometry)
      throw IoError(fmt::format("{}: a source-format output needs the case's source geometry", m.o.context));
    m.source_file = open_source_file(*m.o.source_file, *m.o.geometry, m.seg ? torch::kUInt8 : torch::kFloat, m.o,
                                     /*binary=*/m.seg && pre.out_channels() <= 2);
    m.source_sink = std::make_unique<SourceSlabSink>(*m.source_file, pre, m.o.postprocess);
    if (m.o.geometry->shape != m.shape) {
      m.resampler = std::make_unique<ResamplingSink>(m.shape, m.o.geometry->shape, *m.source_sink);
    }
  }
  const int64_t k = m.seg ? pre.out_channels() : 0;
  m.inter.assign(static_cast<size_t>(k), 0.0);
  m.predicted = m.truth = m.inter;
}

CaseOutputSink::~CaseOutputSink() = default;

void CaseOutputSink::consume(int64_t d0, const torch::Tensor& slab) {
  Impl& m = *impl_;
  const torch::Tensor pred = finalize_slab(slab, m.pre, m.o.postprocess).cpu();  // (d, H, W)
  if (m.whole) {
    m.held.push_back(pred);
  } else {
    m.record(d0, pred);
  }
  if (m.probabilities) {
    const bool sigmoid = m.o.postprocess.head == Head::kSigmoid;  // K - 1 independent probabilities
    m.probabilities->write((sigmoid ? torch::sigmoid(slab) : torch::softmax(slab, /*dim=*/0)).cpu());
  }
  if (m.resampler) m.resampler->consume(d0, slab);
}

CaseScore CaseOutputSink::finish() {
  Impl& m = *impl_;
  if (m.whole && !m.held.empty()) {
    m.record(0, remove_small_components(torch::cat(m.held, /*dim=*/0), m.o.postprocess.min_component_size));
    m.held.clear();
  }
  m.prediction->finish();
  if (m.probabilities) m.probabilities->finish();
  if (m.resampler) m.resampler->finish();
  if (m.source_sink) m.source_sink->finish();  // the resampled labels held for component removal
  if (m.source_file) m.source_file->commit();
  CaseScore s;
  if (m.o.keep_prediction && !m.kept.empty()) s.prediction = torch::cat(m.kept, /*dim=*/0);
  if (m.seg && m.c.target.defined()) {
    std::vector<double> dice, base;
    for (size_t k = 1; k < m.inter.size(); ++k) {
      const double total = m.predicted[k] + m.truth[k];
      dice.push_back(total == 0 ? std::numeric_limits<double>::quiet_NaN() : 2.0 * m.inter[k] / total);
      // All background: 0 for a class the target holds, undefined for one it does not.
      base.push_back(m.truth[k] == 0 ? std::numeric_limits<double>::quiet_NaN() : 0.0);
    }
    s.value = nan_mean(dice);
    s.baseline = nan_mean(base);
  } else if (!m.seg && m.c.raw_target.defined() && m.count > 0) {
    s.value = m.err / m.count;
    s.baseline = m.base_err / m.count;
  }
  return s;
}

PredictionWriter::PredictionWriter(const std::filesystem::path& path, const DatasetInfo& info,
                                   const std::string& source, const std::string& checkpoint)
    : file_(std::make_unique<h5::StagedFile>(path)) {
  h5::Handle root(H5Gopen2(file_->get(), "/", H5P_DEFAULT), H5Gclose);
  h5::write_string_attribute(root.get(), "format", "u3d-predictions");
  h5::write_int_attribute(root.get(), "format_version", kDatasetFormatVersion);
  h5::write_string_attribute(root.get(), "task", to_string(info.task));
  h5::write_string_attribute(root.get(), "target_name", info.target_name);
  h5::write_string_attribute(root.get(), "target_units", info.target_units);
  h5::write_string_attribute(root.get(), "source", source);
  h5::write_string_attribute(root.get(), "checkpoint", checkpoint);
}

PredictionWriter::~PredictionWriter() = default;

CaseOutputOptions PredictionWriter::begin(const CachedCase& c) {
  StopSignals::throw_if_stopped(file_->path().string());
  CaseOutputOptions o;
  o.context = fmt::format("{}: case '{}'", file_->path().string(), c.id);
  o.group = "cases/" + c.id;
  o.file = file_->get();
  h5::Handle group = h5::create_group(file_->get(), o.group, o.context);
  if (c.mask.defined()) h5::write_tensor(file_->get(), o.group + "/mask", c.mask[0], {64, 64, 64}, 4, o.context);
  h5::write_double_list_attribute(group.get(), "spacing", {c.spacing[0], c.spacing[1], c.spacing[2]});
  ids_.push_back(c.id);
  return o;
}

void PredictionWriter::commit(const std::string& split) {
  h5::write_string_dataset(file_->get(), "splits/" + split, ids_);
  file_->commit();
}

}  // namespace u3d
