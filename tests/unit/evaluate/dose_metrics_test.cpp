// OpenKBP dose score and DVH score: hand-computed cases and the challenge sample's golden values.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/evaluate/dose_metrics.h"
#include "u3d/io/openkbp/openkbp.h"

namespace u3d {
namespace {

double at(const torch::Tensor& t, int64_t i) { return t[i].item<double>(); }

TEST(DoseMetrics, PercentilesInterpolateLinearlyAsNumpy) {
  // numpy.percentile([4, 1, 3, 2], [0, 25, 50, 90, 100]) = [1, 1.75, 2.5, 3.7, 4]
  const auto p = percentiles(torch::tensor({4.0, 1.0, 3.0, 2.0}, torch::kDouble), {0, 25, 50, 90, 100});
  EXPECT_DOUBLE_EQ(at(p, 0), 1.0);
  EXPECT_DOUBLE_EQ(at(p, 1), 1.75);
  EXPECT_DOUBLE_EQ(at(p, 2), 2.5);
  EXPECT_NEAR(at(p, 3), 3.7, 1e-15);
  EXPECT_DOUBLE_EQ(at(p, 4), 4.0);
  // One value: every percentile is that value.
  EXPECT_DOUBLE_EQ(at(percentiles(torch::tensor({7.0}, torch::kDouble), {1, 99}), 1), 7.0);
  EXPECT_THROW(percentiles(torch::zeros({0}, torch::kDouble), {50}), DataError);
}

TEST(DoseMetrics, DvhMetricsFollowTheChallengeDefinitions) {
  // 10 voxels of 0..9 Gy, voxel volume 25 mm^3: 0.1 cc = 100 mm^3 = 4 voxels, so D_0.1_cc is the
  // percentile at 100 - 4 / 10 * 100 = 60: index 0.6 * 9 = 5.4 -> 5.4 Gy.
  const auto dose = torch::arange(10, torch::kDouble);
  const auto oar = dvh_metrics(dose, DvhKind::kOar, 25.0);
  EXPECT_NEAR(at(oar, 0), 5.4, 1e-12);
  EXPECT_DOUBLE_EQ(at(oar, 1), 4.5);  // mean
  // Targets: D_99 = 1st percentile (0.09), D_95 = 5th (0.45), D_1 = 99th (8.91).
  const auto target = dvh_metrics(dose, DvhKind::kTarget, 25.0);
  EXPECT_NEAR(at(target, 0), 0.09, 1e-12);
  EXPECT_NEAR(at(target, 1), 0.45, 1e-12);
  EXPECT_NEAR(at(target, 2), 8.91, 1e-12);
  // Round half to even as np.round: 100 / 40 = 2.5 -> 2 voxels -> percentile 80 -> 7.2 Gy.
  EXPECT_NEAR(at(dvh_metrics(dose, DvhKind::kOar, 40.0), 0), 7.2, 1e-12);
  // Large voxels: at least one voxel -> percentile 90 -> 8.1 Gy.
  EXPECT_NEAR(at(dvh_metrics(dose, DvhKind::kOar, 1000.0), 0), 8.1, 1e-12);
}

TEST(DoseMetrics, PatientScoresSkipStructuresThatWereNotContoured) {
  const auto ref = torch::arange(8, torch::kDouble).reshape({2, 2, 2});
  const auto pred = ref + 1.0;
  auto mask = torch::ones({2, 2, 2}, torch::kUInt8);
  mask[0][0][0] = 0;
  auto structures = torch::zeros({2, 2, 2, 2}, torch::kUInt8);
  structures[0][1] = 1;  // structure "A": the 4 voxels of i0 = 1 (doses 4..7)
  const std::vector<DvhStructure> list = {{"A", DvhKind::kOar, 0}, {"B", DvhKind::kTarget, 1}};
  const auto m = evaluate_patient_dose("p", ref, pred, mask, structures, list, {10.0, 10.0, 10.0});
  EXPECT_DOUBLE_EQ(m.dose_error, 8.0 / 7.0);  // |d - p| = 1 on all 8 voxels / 7 mask voxels
  ASSERT_EQ(m.dvh.size(), 2u);                // B is empty: not scored
  EXPECT_EQ(m.dvh[0].metric, "D_0.1_cc");     // 1000 mm^3 voxels: 1 voxel: percentile 75
  EXPECT_NEAR(m.dvh[0].reference, 6.25, 1e-12);
  EXPECT_NEAR(m.dvh[0].prediction, 7.25, 1e-12);
  EXPECT_EQ(m.dvh[1].metric, "mean");
  EXPECT_NEAR(m.dvh[1].abs_error(), 1.0, 1e-12);
  const auto scores = dose_scores({m, m});
  EXPECT_DOUBLE_EQ(scores.dose_score, 8.0 / 7.0);
  EXPECT_NEAR(scores.dvh_score, 1.0, 1e-12);
  EXPECT_EQ(scores.dvh_entries, 4);
}

TEST(DoseMetrics, SubmissionDoseClampsAndMasks) {
  const auto p = submission_dose(torch::tensor({-1.0, 2.0, 3.0}), torch::tensor({1, 1, 0}, torch::kUInt8));
  EXPECT_TRUE(torch::equal(p, torch::tensor({0.0, 2.0, 0.0})));
}

TEST(DoseMetrics, DvhStructuresAutoFindsOpenKbpNames) {
  const std::vector<std::string> channels = {"ct", "Brainstem", "PTV70", "body"};
  const auto a = resolve_dvh_structures({"auto"}, channels);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_EQ(a[0].name, "Brainstem");
  EXPECT_EQ(a[0].kind, DvhKind::kOar);
  EXPECT_EQ(a[0].channel, 1);
  EXPECT_EQ(a[1].kind, DvhKind::kTarget);
  EXPECT_TRUE(resolve_dvh_structures({}, channels).empty());
  EXPECT_TRUE(resolve_dvh_structures({"auto"}, {"ct", "ptv"}).empty());
  const auto e = resolve_dvh_structures({"target:body", "oar:PTV70"}, channels);
  EXPECT_EQ(e[0].kind, DvhKind::kTarget);
  EXPECT_EQ(e[0].channel, 3);
  EXPECT_EQ(e[1].kind, DvhKind::kOar);
  EXPECT_THROW(resolve_dvh_structures({"Larynx"}, channels), ConfigError);
}

// The three synthetic predictions of ../shared/data/README.md against the golden values computed
// with the challenge's own definitions, to 1e-4.
TEST(DoseMetrics, ReproducesTheGoldenValuesOfTheSample) {
  test::TempDir dir;
  const auto source = test::unpack_openkbp_sample(dir.path());
  if (!source) GTEST_SKIP() << "OpenKBP sample not found (../shared/data)";
  const auto by_patient = test::read_csv(*test::shared_data_dir() / "openkbp-sample-metrics-by-patient.csv");
  const auto summary = test::read_csv(*test::shared_data_dir() / "openkbp-sample-metrics-summary.csv");
  ASSERT_EQ(by_patient.size(), 12u);
  ASSERT_EQ(summary.size(), 3u);

  std::vector<DvhStructure> structures;
  for (const auto& name : openkbp::structure_names()) {
    structures.push_back(
        {name, name.rfind("PTV", 0) == 0 ? DvhKind::kTarget : DvhKind::kOar, static_cast<int64_t>(structures.size())});
  }
  std::map<std::string, std::vector<PatientDoseMetrics>> results;
  for (const auto& id : {"pt_201", "pt_202", "pt_203", "pt_204"}) {
    const auto p = openkbp::read_patient(*source / "validation-pats" / id);
    const auto d = p.dose.to(torch::kDouble);
    const auto mask = p.possible_dose_mask;
    std::map<std::string, torch::Tensor> predictions;
    predictions["scale95"] = 0.95 * d;
    auto shifted = torch::zeros_like(d);  // p[i + 1, :, :] = d[i, :, :], p[0] = 0
    shifted.slice(0, 1).copy_(d.slice(0, 0, d.size(0) - 1));
    predictions["shift"] = shifted;
    const auto box = torch::nn::functional::avg_pool3d(
        d.unsqueeze(0).unsqueeze(0),
        torch::nn::functional::AvgPool3dFuncOptions(3).stride(1).padding(1).count_include_pad(true));
    predictions["blur"] = box[0][0] * mask.to(torch::kDouble);
    for (const auto& [name, pred] : predictions) {
      results[name].push_back(evaluate_patient_dose(id, p.dose, pred, mask, p.structures, structures, p.spacing));
    }
  }
  double max_deviation = 0;
  for (const auto& row : by_patient) {
    const auto& list = results.at(row.at("transform"));
    const auto it = std::find_if(list.begin(), list.end(), [&](const auto& m) { return m.id == row.at("patient"); });
    ASSERT_NE(it, list.end());
    const std::string what = row.at("transform") + " " + row.at("patient");
    EXPECT_NEAR(it->dose_error, std::stod(row.at("dose_error")), 1e-4) << what;
    EXPECT_NEAR(it->dvh_mean_abs_error(), std::stod(row.at("dvh_mean_abs_error")), 1e-4) << what;
    EXPECT_EQ(static_cast<int64_t>(it->dvh.size()), std::stoll(row.at("n_dvh_metrics"))) << what;
    max_deviation = std::max({max_deviation, std::abs(it->dose_error - std::stod(row.at("dose_error"))),
                              std::abs(it->dvh_mean_abs_error() - std::stod(row.at("dvh_mean_abs_error")))});
  }
  for (const auto& row : summary) {
    const auto scores = dose_scores(results.at(row.at("transform")));
    EXPECT_NEAR(scores.dose_score, std::stod(row.at("dose_score")), 1e-4) << row.at("transform");
    EXPECT_NEAR(scores.dvh_score, std::stod(row.at("dvh_score")), 1e-4) << row.at("transform");
    std::printf("%s: dose score %.6f (golden %s), DVH score %.6f (golden %s)\n", row.at("transform").c_str(),
                scores.dose_score, row.at("dose_score").c_str(), scores.dvh_score, row.at("dvh_score").c_str());
    max_deviation = std::max({max_deviation, std::abs(scores.dose_score - std::stod(row.at("dose_score"))),
                              std::abs(scores.dvh_score - std::stod(row.at("dvh_score")))});
  }
  std::printf("largest deviation from the golden values: %.2g Gy\n", max_deviation);
}

}  // namespace
}  // namespace u3d
