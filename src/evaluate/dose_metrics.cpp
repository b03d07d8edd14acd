#include "u3d/evaluate/dose_metrics.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "u3d/core/csv.h"
#include "u3d/core/errors.h"
#include "u3d/core/parallel.h"
#include "u3d/core/stats.h"
#include "u3d/core/text.h"
#include "u3d/io/openkbp/openkbp.h"

namespace u3d {

torch::Tensor percentiles(const torch::Tensor& values, const std::vector<double>& q) {
  const int64_t n = values.numel();
  if (n == 0) throw DataError("percentiles of an empty set of values");
  const torch::Tensor sorted = std::get<0>(values.reshape({-1}).sort());
  std::vector<int64_t> lo(q.size()), hi(q.size());
  std::vector<double> t(q.size());
  for (size_t i = 0; i < q.size(); ++i) {  // core/stats.h's convention, numpy's "linear"
    const PercentileRank r = percentile_rank(static_cast<size_t>(n), q[i]);
    lo[i] = static_cast<int64_t>(r.lo);
    hi[i] = static_cast<int64_t>(r.hi);
    t[i] = r.t;
  }
  const auto dev = sorted.device();
  const auto a = sorted.index_select(0, torch::tensor(lo, torch::kLong).to(dev));
  const auto b = sorted.index_select(0, torch::tensor(hi, torch::kLong).to(dev));
  const auto tt = torch::tensor(t, torch::kDouble).to(dev, sorted.scalar_type());
  const auto diff = b - a;
  return torch::where(tt >= 0.5, b - diff * (1.0 - tt), a + diff * tt);
}

const std::vector<std::string>& dvh_metric_names(DvhKind kind) {
  static const std::vector<std::string> oar = {"D_0.1_cc", "mean"};
  static const std::vector<std::string> target = {"D_99", "D_95", "D_1"};
  return kind == DvhKind::kOar ? oar : target;
}

torch::Tensor dvh_metrics(const torch::Tensor& structure_dose, DvhKind kind, double voxel_volume_mm3) {
  const torch::Tensor d = structure_dose.reshape({-1}).to(torch::kDouble);
  if (kind == DvhKind::kTarget) return percentiles(d, {1.0, 5.0, 99.0});
  // 0.1 cc = 100 mm^3; np.round rounds half to even, as nearbyint does in the default mode.
  const double voxels_in_tenth_cc = std::max(1.0, std::nearbyint(100.0 / voxel_volume_mm3));
  const double q = 100.0 - voxels_in_tenth_cc / static_cast<double>(d.numel()) * 100.0;
  return torch::cat({percentiles(d, {std::clamp(q, 0.0, 100.0)}), d.mean().reshape({1})});
}

std::vector<DvhStructure> resolve_dvh_structures(const std::vector<std::string>& spec,
                                                 const std::vector<std::string>& channel_names) {
  std::vector<DvhStructure> out;
  if (spec.size() == 1 && spec[0] == "auto") {
    for (const auto& name : openkbp::structure_names()) {
      const auto ch = find_channel(channel_names, name);
      if (!ch) continue;
      const bool target = std::find(openkbp::target_names().begin(), openkbp::target_names().end(), name) !=
                          openkbp::target_names().end();
      out.push_back({name, target ? DvhKind::kTarget : DvhKind::kOar, *ch});
    }
    return out;
  }
  if (spec.size() == 1 && spec[0] == "none") return out;
  for (const auto& entry : spec) {
    std::string name = entry;
    DvhKind kind = entry.rfind("PTV", 0) == 0 ? DvhKind::kTarget : DvhKind::kOar;
    if (entry.rfind("target:", 0) == 0) {
      name = entry.substr(7);
      kind = DvhKind::kTarget;
    } else if (entry.rfind("oar:", 0) == 0) {
      name = entry.substr(4);
      kind = DvhKind::kOar;
    }
    const auto ch = find_channel(channel_names, name);
    if (!ch || name == "auto" || name == "none") {
      throw ConfigError(
          fmt::format("data.dvh_structures: '{}' is not a channel of the dataset (channels: {}); use "
                      "[auto], [] or channel names",
                      entry, fmt::join(channel_names, ", ")));
    }
    out.push_back({name, kind, *ch});
  }
  return out;
}

double PatientDoseMetrics::dvh_mean_abs_error() const {
  if (dvh.empty()) return std::numeric_limits<double>::quiet_NaN();
  double sum = 0;
  for (const auto& e : dvh) sum += e.abs_error();
  return sum / static_cast<double>(dvh.size());
}

torch::Tensor submission_dose(const torch::Tensor& prediction, const torch::Tensor& possible_dose_mask) {
  torch::Tensor p = prediction.clamp_min(0);
  if (possible_dose_mask.defined()) p = p * possible_dose_mask.reshape(prediction.sizes()).to(p.scalar_type());
  return p;
}

PatientDoseMetrics evaluate_patient_dose(const std::string& id, const torch::Tensor& reference,
                                         const torch::Tensor& prediction, const torch::Tensor& possible_dose_mask,
                                         const torch::Tensor& structures,
                                         const std::vector<DvhStructure>& structure_list,
                                         const std::array<double, 3>& spacing) {
  const auto context = [&] { return fmt::format("dose metrics of case '{}'", id); };
  if (reference.sizes() != prediction.sizes()) {
    throw DataError(fmt::format("{}: prediction is ({}) but the reference dose is ({})", context(),
                                fmt::join(prediction.sizes(), ", "), fmt::join(reference.sizes(), ", ")));
  }
  if (structures.defined() && structures.size(0) != static_cast<int64_t>(structure_list.size())) {
    throw DataError(
        fmt::format("{}: {} structure masks for {} structures", context(), structures.size(0), structure_list.size()));
  }
  const torch::Tensor d = reference.to(torch::kDouble);
  const torch::Tensor p = prediction.to(prediction.device(), torch::kDouble);
  const double voxel_volume = spacing[0] * spacing[1] * spacing[2];
  std::vector<torch::Tensor> parts = {(d - p).abs().sum().reshape({1}),
                                      possible_dose_mask.reshape({-1}).to(torch::kDouble).sum().reshape({1})};
  std::vector<size_t> scored;  // structure_list positions that are contoured
  if (!structure_list.empty()) {
    const torch::Tensor masks = structures.reshape({structures.size(0), -1}) != 0;  // (S, V) bool
    const torch::Tensor counts = masks.sum(1).cpu();                                // one sync
    const torch::Tensor d_flat = d.reshape({-1}), p_flat = p.reshape({-1});
    for (size_t s = 0; s < structure_list.size(); ++s) {
      if (counts[static_cast<int64_t>(s)].item<int64_t>() == 0) continue;  // not contoured: skipped
      const torch::Tensor m = masks[static_cast<int64_t>(s)];
      parts.push_back(dvh_metrics(d_flat.masked_select(m), structure_list[s].kind, voxel_volume));
      parts.push_back(dvh_metrics(p_flat.masked_select(m), structure_list[s].kind, voxel_volume));
      scored.push_back(s);
    }
  }
  const torch::Tensor all = torch::cat(parts).cpu();  // one device-to-host copy
  const double* v = all.data_ptr<double>();
  PatientDoseMetrics out;
  out.id = id;
  if (v[1] <= 0) throw DataError(fmt::format("{}: the possible-dose mask is empty", context()));
  out.dose_error = v[0] / v[1];
  size_t k = 2;
  for (size_t s : scored) {
    const auto& names = dvh_metric_names(structure_list[s].kind);
    for (size_t m = 0; m < names.size(); ++m) {
      out.dvh.push_back({structure_list[s].name, names[m], v[k + m], v[k + names.size() + m]});
    }
    k += 2 * names.size();
  }
  return out;
}

DoseScores dose_scores(const std::vector<PatientDoseMetrics>& patients) {
  DoseScores s;
  double dose_sum = 0, dvh_sum = 0;
  int64_t dose_n = 0;
  for (const auto& p : patients) {
    if (std::isfinite(p.dose_error)) {
      dose_sum += p.dose_error;
      ++dose_n;
    }
    for (const auto& e : p.dvh) {
      if (!std::isfinite(e.abs_error())) continue;
      dvh_sum += e.abs_error();
      ++s.dvh_entries;
    }
  }
  s.patients = static_cast<int64_t>(patients.size());
  if (dose_n > 0) s.dose_score = dose_sum / static_cast<double>(dose_n);
  if (s.dvh_entries > 0) s.dvh_score = dvh_sum / static_cast<double>(s.dvh_entries);
  return s;
}

std::string dose_metrics_by_patient_csv(const std::vector<PatientDoseMetrics>& patients) {
  std::string out = csv_row({"patient", "dose_error", "dvh_mean_abs_error", "n_dvh_metrics"});
  for (const auto& p : patients) {
    const double dvh = p.dvh_mean_abs_error();
    out += csv_row({p.id, fmt::format("{:.6f}", p.dose_error), std::isfinite(dvh) ? fmt::format("{:.6f}", dvh) : "",
                    std::to_string(p.dvh.size())});
  }
  return out;
}

std::string dvh_entries_csv(const std::vector<PatientDoseMetrics>& patients) {
  std::string out = csv_row({"patient", "structure", "metric", "reference_gy", "prediction_gy", "abs_error_gy"});
  for (const auto& p : patients) {
    for (const auto& e : p.dvh) {
      out += csv_row({p.id, e.structure, e.metric, fmt::format("{:.6f}", e.reference),
                      fmt::format("{:.6f}", e.prediction), fmt::format("{:.6f}", e.abs_error())});
    }
  }
  return out;
}

// ---------------------------------------------------------------------------------------------
DoseEvaluator::DoseEvaluator(const DatasetReader& reader, const std::vector<std::string>& ids,
                             std::vector<DvhStructure> structures, int64_t threads)
    : structures_(std::move(structures)) {
  if (structures_.size() > 63) {
    throw ConfigError(fmt::format("data.dvh_structures: {} structures; at most 63 are supported", structures_.size()));
  }
  const auto dtype = structures_.size() <= 15   ? torch::kInt16
                     : structures_.size() <= 31 ? torch::kInt32
                                                : torch::kInt64;
  std::vector<CaseInfo> infos(ids.size());
  parallel_for(static_cast<int64_t>(ids.size()), threads, [&](int64_t k) {
    const auto i = static_cast<size_t>(k);
    const CaseData c = reader.read_case(ids[i]);
    torch::Tensor bits = torch::zeros(c.image.sizes().slice(1), dtype);  // (D, H, W), bit s = structure s
    for (size_t s = 0; s < structures_.size(); ++s) {
      const auto inside = (c.image[structures_[s].channel] != 0).to(dtype);
      bits.bitwise_or_(inside * (int64_t{1} << s));
    }
    infos[i] = CaseInfo{bits, c.spacing};
  });
  for (size_t i = 0; i < ids.size(); ++i) cases_[ids[i]] = std::move(infos[i]);
}

PatientDoseMetrics DoseEvaluator::evaluate(const std::string& id, const torch::Tensor& prediction,
                                           const torch::Tensor& reference,
                                           const torch::Tensor& possible_dose_mask) const {
  const auto it = cases_.find(id);
  if (it == cases_.end()) throw DataError(fmt::format("dose metrics: case '{}' was not prepared", id));
  const auto dev = prediction.device();
  const torch::Tensor mask = possible_dose_mask.to(dev).reshape(prediction.sizes());
  const torch::Tensor bits = it->second.bits.to(dev);
  std::vector<int64_t> shifts(structures_.size());
  for (size_t s = 0; s < shifts.size(); ++s) shifts[s] = static_cast<int64_t>(s);
  torch::Tensor structures;  // (S, D, H, W) {0, 1}
  if (!structures_.empty()) {
    const auto shift = torch::tensor(shifts, bits.scalar_type()).to(dev).view({-1, 1, 1, 1});
    structures = bits.unsqueeze(0).bitwise_right_shift(shift).bitwise_and(1);
  }
  return evaluate_patient_dose(id, reference.to(dev), submission_dose(prediction, mask), mask, structures, structures_,
                               it->second.spacing);
}

}  // namespace u3d
