// Dose-prediction metrics exactly as the OpenKBP challenge defines them
// (github.com/ababier/open-kbp, provided_code/dose_evaluation_class.py), in torch ops that run on
// the tensors' device (CPU, or the GPU during validation), in float64.
//
// Per patient, with reference dose d and prediction p (Gy, whole grid):
//   dose error = sum(|d - p|) over all voxels / number of voxels in the possible-dose mask
//   DVH metrics per contoured structure (non-empty mask), of d and of p inside the structure:
//     organ at risk: D_0.1_cc = percentile at 100 - 100 * n / voxels_in_structure with
//                    n = max(1, round(100 mm^3 / voxel volume)) (round half to even, as np.round);
//                    mean = mean dose
//     target:        D_99 = 1st percentile, D_95 = 5th percentile, D_1 = 99th percentile
//   percentiles interpolate linearly between order statistics (numpy's default "linear" method).
// dose score = mean of the patients' dose errors; DVH score = mean of |metric(d) - metric(p)| over
// every (patient, structure, metric) entry. A structure smaller than 0.1 cc, where the challenge's
// code fails, uses the 0th percentile (its minimum).
//
// The challenge scores the submitted files, i.e. prediction * possible_dose_mask with values <= 0
// dropped; submission_dose() gives that from a network's prediction, and validation and
// `trainer evaluate openkbp` apply it to predictions that are not already in submission form.
#pragma once
#include <torch/torch.h>

#include <array>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "u3d/io/h5/dataset.h"

namespace u3d {

// Percentiles q (0..100) of a tensor's values in core/stats.h's convention (numpy.percentile), one
// sort on the tensor's device; returns (len(q),) in the tensor's dtype. `values` must not be empty.
torch::Tensor percentiles(const torch::Tensor& values, const std::vector<double>& q);

enum class DvhKind { kOar, kTarget };
// The challenge's metric names: organ at risk {"D_0.1_cc", "mean"}; target {"D_99", "D_95", "D_1"}.
const std::vector<std::string>& dvh_metric_names(DvhKind kind);

// DVH metrics (dvh_metric_names(kind) order) of the dose values inside one structure: (M,) float64.
torch::Tensor dvh_metrics(const torch::Tensor& structure_dose, DvhKind kind, double voxel_volume_mm3);

// A structure whose DVH metrics are scored: `channel` is its index in the dataset's channels.
struct DvhStructure {
  std::string name;
  DvhKind kind = DvhKind::kOar;
  int64_t channel = -1;
};
// Resolves data.dvh_structures against a dataset's channel names:
//   [auto]          the OpenKBP structure names found among the channels (PTV* are targets);
//   []              none;
//   [NAME, ...]     those channels; each NAME is an organ at risk unless it starts with "PTV" or is
//                   written target:NAME (oar:NAME forces an organ at risk).
// ConfigError naming the key when a NAME is not a channel.
std::vector<DvhStructure> resolve_dvh_structures(const std::vector<std::string>& spec,
                                                 const std::vector<std::string>& channel_names);

struct DvhEntry {
  std::string structure;
  std::string metric;     // e.g. "D_99"
  double reference = 0;   // Gy
  double prediction = 0;  // Gy
  double abs_error() const { return std::abs(reference - prediction); }
};

struct PatientDoseMetrics {
  std::string id;
  double dose_error = 0;              // Gy
  std::vector<DvhEntry> dvh;          // every metric of every contoured structure
  double dvh_mean_abs_error() const;  // NaN without entries
};

// One patient. reference, prediction, possible_dose_mask: (D, H, W) on one device; structures:
// (S, D, H, W) {0, 1} masks (any dtype) on that device, in the order of `structure_list`
// (S = structure_list.size()); spacing in mm. Uses one device-to-host copy for all metrics.
PatientDoseMetrics evaluate_patient_dose(const std::string& id, const torch::Tensor& reference,
                                         const torch::Tensor& prediction, const torch::Tensor& possible_dose_mask,
                                         const torch::Tensor& structures,
                                         const std::vector<DvhStructure>& structure_list,
                                         const std::array<double, 3>& spacing);

// What the challenge scores for a network prediction: max(prediction, 0) * possible_dose_mask.
torch::Tensor submission_dose(const torch::Tensor& prediction, const torch::Tensor& possible_dose_mask);

struct DoseScores {
  double dose_score = std::numeric_limits<double>::quiet_NaN();  // Gy
  double dvh_score = std::numeric_limits<double>::quiet_NaN();   // Gy
  int64_t patients = 0;
  int64_t dvh_entries = 0;
};
DoseScores dose_scores(const std::vector<PatientDoseMetrics>& patients);

// CSV text: "patient,dose_error,dvh_mean_abs_error,n_dvh_metrics" per patient (the layout of the
// challenge sample's golden by-patient file), and one row per DVH entry
// ("patient,structure,metric,reference_gy,prediction_gy,abs_error_gy").
std::string dose_metrics_by_patient_csv(const std::vector<PatientDoseMetrics>& patients);
std::string dvh_entries_csv(const std::vector<PatientDoseMetrics>& patients);

// The dose metrics of a dataset's validation cases during training: keeps each case's DVH
// structure masks (packed as bits of one int16 volume per case, read from the raw channels of the
// dataset file, so channel selection and normalisation do not matter) and its spacing.
class DoseEvaluator {
 public:
  // Reads `ids` from `reader` with `threads` threads. `structures` from resolve_dvh_structures.
  DoseEvaluator(const DatasetReader& reader, const std::vector<std::string>& ids, std::vector<DvhStructure> structures,
                int64_t threads);
  // prediction: (D, H, W) in Gy as the network gives it (submission_dose() is applied here);
  // reference: (D, H, W) Gy; possible_dose_mask: (D, H, W) or (1, D, H, W). Any one device.
  PatientDoseMetrics evaluate(const std::string& id, const torch::Tensor& prediction, const torch::Tensor& reference,
                              const torch::Tensor& possible_dose_mask) const;
  const std::vector<DvhStructure>& structures() const { return structures_; }

 private:
  struct CaseInfo {
    torch::Tensor bits;  // (D, H, W) int16: bit s set where structure s is
    std::array<double, 3> spacing;
  };
  std::vector<DvhStructure> structures_;
  std::map<std::string, CaseInfo> cases_;
};

}  // namespace u3d
