// Quality on CPU: a tiny U-Net trained for a short while on the real OpenKBP sample's 12 training
// patients predicts the 4 validation patients better than the "all zeros" and "mean dose"
// predictions, by the challenge's dose score (computed during validation, in metrics.csv).
//
// To fit a CI budget on 2 CPU cores the volumes are down-sampled by 4 (128^3 -> 32^3: CT and dose
// averaged, structure and possible-dose masks kept where any voxel of the 4^3 block is inside),
// which keeps the anatomy and the dose's shape; the scores are then those of the coarse grid.
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/evaluate/dose_metrics.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/openkbp/openkbp.h"

namespace u3d {
namespace {

constexpr int64_t kFactor = 4;

torch::Tensor avg_down(const torch::Tensor& t) {  // (..., D, H, W) float
  const auto x = t.to(torch::kFloat).reshape({-1, 1, t.size(-3), t.size(-2), t.size(-1)});
  const auto y = torch::avg_pool3d(x, kFactor);
  auto sizes = t.sizes().vec();
  for (size_t i = sizes.size() - 3; i < sizes.size(); ++i) sizes[i] /= kFactor;
  return y.reshape(sizes);
}
torch::Tensor any_down(const torch::Tensor& t) { return (avg_down(t) > 0).to(torch::kUInt8); }

// The sample imported, then down-sampled into a second dataset with the OpenKBP channel names.
fs::path make_small_dataset(const fs::path& dir, const fs::path& source) {
  openkbp::CsvImportOptions o;
  o.source = source;
  o.out = dir / "openkbp.h5";
  o.threads = 2;
  openkbp::import_dataset(o);
  const DatasetReader reader(o.out);
  const fs::path small = dir / "openkbp_32.h5";
  DatasetWriter writer(small, reader.info());
  for (const auto& [split, ids] : reader.info().splits) {
    for (const auto& id : ids) {
      const CaseData c = reader.read_case(id);
      CaseData s;
      s.id = id;
      s.image = torch::cat({avg_down(c.image[0]).unsqueeze(0), any_down(c.image.slice(0, 1)).to(torch::kFloat)},
                           0);  // (11, 32, 32, 32)
      s.target = avg_down(c.target);
      s.mask = any_down(c.mask);
      s.spacing = {c.spacing[0] * kFactor, c.spacing[1] * kFactor, c.spacing[2] * kFactor};
      writer.write_case(s);
    }
    writer.set_split(split, ids);
  }
  writer.commit();
  return small;
}

TEST(OpenKbpQuality, TinyNetworkBeatsZerosAndMeanDoseOnTheSample) {
  test::TempDir dir;
  const auto source = test::unpack_openkbp_sample(dir / "sample");
  if (!source) GTEST_SKIP() << "OpenKBP sample not found (../shared/data)";
  const fs::path data = make_small_dataset(dir.path(), *source);

  // Baselines on the same grid, scored by the same code.
  const DatasetReader reader(data);
  double sum = 0, count = 0;
  for (const auto& id : reader.split("train")) {
    const CaseData c = reader.read_case(id);
    sum += c.target.masked_select(c.mask.to(torch::kBool)).sum().item<double>();
    count += static_cast<double>(c.mask.sum().item<int64_t>());
  }
  const double mean_dose = sum / count;
  const auto structures = resolve_dvh_structures({"auto"}, reader.info().channel_names);
  ASSERT_EQ(structures.size(), 10u);
  const DoseEvaluator evaluator(reader, reader.split("val"), structures, 2);
  std::vector<PatientDoseMetrics> zeros, means;
  for (const auto& id : reader.split("val")) {
    const CaseData c = reader.read_case(id);
    zeros.push_back(evaluator.evaluate(id, torch::zeros_like(c.target), c.target, c.mask));
    means.push_back(evaluator.evaluate(id, torch::full_like(c.target, mean_dose), c.target, c.mask));
  }
  const double zeros_score = dose_scores(zeros).dose_score;
  const double mean_score = dose_scores(means).dose_score;

  test::write_text(dir / "quality.yaml", R"(experiment: {name: quality, seed: 3}
data:
  path: openkbp_32.h5
  batch_size: 2
  patch_size: 32               # whole (down-sampled) volumes
  normalize: ["clip:0:2500", none, none, none, none, none, none, none, none, none, none]
  target_scale: 70
augment: {flip_prob: 0}
model: {levels: 3, base_filters: 8, norm: instance}
training: {device: cpu, threads: 2, epochs: 14, lr: 0.003, warmup_steps: 6, loss: masked_l1, val_every: 2}
predict: {overlap: 0}
checkpoint: {every_epochs: 14, monitor: val_dose_score}
logging: {progress_seconds: 0}
)");
  const auto r = test::run_trainer({"--config", "quality.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const auto rows = test::read_csv(dir / "runs" / "quality" / "metrics.csv");
  ASSERT_EQ(rows.size(), 14u);
  std::vector<double> scores;
  for (const auto& row : rows) {
    if (!row.at("val_dose_score").empty()) scores.push_back(std::stod(row.at("val_dose_score")));
  }
  ASSERT_EQ(scores.size(), 7u);
  EXPECT_FALSE(rows.back().at("val_dvh_score").empty());
  const double best = *std::min_element(scores.begin(), scores.end());
  RecordProperty("zeros_dose_score", std::to_string(zeros_score));
  RecordProperty("mean_dose_score", std::to_string(mean_score));
  RecordProperty("val_dose_score", std::to_string(scores.back()));
  std::printf(
      "dose score on the 32^3 grid: all zeros %.3f Gy, mean dose (%.2f Gy) %.3f Gy, network after %zu epochs %.3f "
      "Gy (best %.3f Gy, DVH score %s Gy)\n",
      zeros_score, mean_dose, mean_score, rows.size(), scores.back(), best, rows.back().at("val_dvh_score").c_str());
  EXPECT_LT(scores.back(), mean_score);
  EXPECT_LT(scores.back(), zeros_score);
  EXPECT_LT(scores.back(), scores.front());  // it learned during the run (first score: after 2 epochs)
  EXPECT_LT(mean_score, zeros_score);
}

}  // namespace
}  // namespace u3d
