// Streamed per-case outputs of `trainer --predict-only`. The blended network output of one case
// arrives slab by slab along D (SlabSink, from the streaming sliding_window_predict) and is turned
// into labels (segmentation: argmax, or postprocess.h's threshold and small-component removal) or
// values in target units (regression), scored against the case's target, written into the
// predictions HDF5 file and, for cases imported from NIfTI or TIFF, into a file of the input's format:
// NIfTI with the input's header in the input's grid (import resampling undone), or a 3D TIFF volume
// (io/tiff/tiff.h; held whole and written at finish(), as TIFF is written a volume at a time); a case imported from 2D
// slices (format "slices", io/images/image2d_import.h) gets the TIFF volume <case>.tif and, beside it, one 8-bit PNG
// per slice, <case>/<image stem>_mask.png (0/255 for two classes, else the label values). No stage holds a whole volume
// of logits, so a 512x512x300 CT predicts in bounded host memory; with component removal the case's uint8 labels (and
// those in the NIfTI grid) are held whole and written at finish().
#pragma once
#include <torch/torch.h>

#include <filesystem>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "u3d/data/cache.h"
#include "u3d/data/preprocess.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/predict/postprocess.h"
#include "u3d/predict/predictor.h"

namespace u3d {
namespace h5 {
class StagedFile;
}

// Trilinear resampling of a slab stream to `out_shape` (align_corners = false: the same values as
// F.interpolate(mode = trilinear) of the whole volume). Each slab is first resampled in-plane; only
// the input rows the next output rows need are kept. Output slabs go to `downstream` in order.
class ResamplingSink : public SlabSink {
 public:
  ResamplingSink(const Shape3& in_shape, const Shape3& out_shape, SlabSink& downstream);
  void consume(int64_t d0, const torch::Tensor& slab) override;
  // IoError unless every output row was produced.
  void finish() const;

 private:
  Shape3 in_, out_;
  SlabSink& downstream_;
  std::map<int64_t, torch::Tensor> rows_;  // input row -> (K, H_out, W_out)
  int64_t next_out_ = 0;
};

struct CaseOutputOptions {
  int64_t file = -1;           // hid_t of the open predictions file
  std::string group;           // the case's group in it, e.g. "cases/case_001" (must exist)
  std::string context;         // for messages: "<file>: case '<id>'"
  bool probabilities = false;  // segmentation: also write <group>/probabilities (K, D, H, W) float32 softmax
  // Segmentation: how labels are made from the output (checked by check_postprocess beforehand); the
  // prediction, its score, the kept prediction and the NIfTI file all get the post-processed labels
  // (in the NIfTI grid, components are removed after resampling, counted in that grid's voxels).
  PostprocessOptions postprocess;
  // Source-format output (geometry->format "nifti", "tiff", "slices" or "dicom", writes_source_file): written to
  // `source_file` (NIfTI with `geometry`'s header), resampled to geometry.shape when that differs
  // from the case's grid. Both set or neither.
  std::optional<std::filesystem::path> source_file;
  std::optional<SourceGeometry> geometry;
  std::string description = "u3d prediction";  // NIfTI descrip, DICOM SeriesDescription
  std::vector<std::string> class_names;        // segmentation from DICOM: the RT Structure Set's ROI names (1..K-1)
  // Also keep the whole prediction in host memory and return it in CaseScore::prediction (small
  // grids that another writer needs at once, e.g. the OpenKBP submission files).
  bool keep_prediction = false;
};

struct CaseScore {
  // Segmentation: mean Dice of the foreground classes present (dice_per_class); regression: MAE in
  // target units inside the loss mask. NaN when the case has no target.
  double value = std::numeric_limits<double>::quiet_NaN();
  // The same score of the baseline: all background, or the training mean everywhere.
  double baseline = std::numeric_limits<double>::quiet_NaN();
  // With keep_prediction: (D, H, W) uint8 labels or float32 target units, on the CPU.
  torch::Tensor prediction;
};

// Whether a case imported from `g`'s format gets its prediction written in that format too: NIfTI,
// TIFF, slices (PNG masks), DICOM (an RT Dose or RT Structure Set, io/dicom/dicom_write.h; not for an
// anonymised import, which recorded no source file).
bool writes_source_file(const SourceGeometry& g);

class CaseOutputSink : public SlabSink {
 public:
  // `c` is the case in the dataset's grid (its target scores the prediction); `train_mean` is the
  // regression baseline value (target units).
  CaseOutputSink(const CachedCase& c, const Preprocessor& pre, CaseOutputOptions options, double train_mean);
  ~CaseOutputSink() override;
  // slab: (K, d, H, W) network output (logits or regression output in training units).
  void consume(int64_t d0, const torch::Tensor& slab) override;
  // Writes what is buffered, commits the NIfTI file, and returns the case's scores.
  CaseScore finish();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The predictions file of one split (docs/dataset-format.md, "Predictions"): root attributes
// format="u3d-predictions", task, target name and units, source, checkpoint; /cases/<id>/prediction
// (D, H, W) with the case's spacing and its loss mask (so an evaluation can apply it). Staged and
// renamed into place by commit(); without commit() nothing is left behind.
class PredictionWriter {
 public:
  PredictionWriter(const std::filesystem::path& path, const DatasetInfo& info, const std::string& source,
                   const std::string& checkpoint);
  ~PredictionWriter();
  PredictionWriter(const PredictionWriter&) = delete;
  PredictionWriter& operator=(const PredictionWriter&) = delete;
  // Starts a case whose outputs are streamed (CaseOutputSink): its group, loss mask and spacing.
  // Throws StopRequested when a stop signal arrived (predict-only installs the guard).
  CaseOutputOptions begin(const CachedCase& c);
  // Writes splits/<split> (the ids begun) and moves the file into place.
  void commit(const std::string& split);

 private:
  std::unique_ptr<h5::StagedFile> file_;
  std::vector<std::string> ids_;
};

}  // namespace u3d
