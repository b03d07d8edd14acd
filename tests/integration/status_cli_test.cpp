// What a training run reports as it goes, through the real binary on a tiny nnU-Net phantom
// (liver, tumour): nnU-Net's per-class pseudo-Dice in the epoch line, metrics.csv (dice_<class>)
// and TensorBoard (epoch/dice_<class>); the validation time beside the training time.
#include <gtest/gtest.h>

#include <fmt/format.h>

#include <cmath>
#include <regex>
#include <sstream>

#include "nifti_support.h"
#include "test_support.h"

namespace u3d {
namespace {

std::string config(const std::string& name) {
  std::ostringstream s;
  s << "experiment:\n  name: " << name << "\n  seed: 7\n"
    << "data:\n  path: d.h5\n  batch_size: 2\n  patch_size: 16\n  normalize: [dataset]\n"
    << "  foreground_fraction: 0.5\n"
    << "model:\n  levels: 3\n  base_filters: 4\n"
    << "training:\n  epochs: 2\n  steps_per_epoch: 3\n  optimizer: sgd\n  lr: 0.01\n"
    << "  threads: 1\n  deterministic: true\n  device: cpu\n  val_patch_batches: 3\n"
    << "logging:\n  progress_seconds: 0\n  tensorboard: true\n";
  return s.str();
}

double number(const std::string& text) { return text.empty() ? std::nan("") : std::stod(text); }

TEST(StatusCli, PseudoDicePerClassInTheEpochLineMetricsCsvAndTensorBoard) {
  test::TempDir dir;
  const fs::path raw = test::make_nnunet_raw(dir.path(), 4, Shape3{20, 24, 28});
  auto r = test::run_trainer({"import", "nnunet", "--source", raw.string(), "--out", "d.h5", "--val-fraction", "0.25"},
                             dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::write_text(dir / "s.yaml", config("s"));
  r = test::run_trainer({"--config", "s.yaml"}, dir.path());
  ASSERT_EQ(r.exit_code, 0) << r.output;
  const fs::path run = dir / "runs" / "s";
  const auto rows = test::read_csv(run / "metrics.csv");
  ASSERT_EQ(rows.size(), 2u);
  const std::regex line_re(R"(epoch (\d)/2: .* pseudo_dice ([0-9.]+) \[([0-9.na]+), ([0-9.na]+)\] \(ema)");
  std::vector<std::smatch> lines;
  for (auto it = std::sregex_iterator(r.output.begin(), r.output.end(), line_re); it != std::sregex_iterator(); ++it) {
    lines.push_back(*it);
  }
  ASSERT_EQ(lines.size(), 2u) << r.output;
  for (size_t e = 0; e < rows.size(); ++e) {
    const auto& row = rows[e];
    ASSERT_TRUE(row.count("dice_liver") && row.count("dice_tumour")) << "columns named after the dataset's classes";
    const double liver = number(row.at("dice_liver")), tumour = number(row.at("dice_tumour"));
    // The per-class values are those the mean is made of: nnU-Net's mean over the classes present.
    double sum = 0;
    int present = 0;
    for (double d : {liver, tumour}) {
      if (!std::isfinite(d)) continue;
      EXPECT_GE(d, 0.0);
      EXPECT_LE(d, 1.0);
      sum += d;
      ++present;
    }
    ASSERT_GT(present, 0) << "patches drawn with foreground_fraction 0.5 hold a class";
    EXPECT_NEAR(sum / present, number(row.at("val_pseudo_dice")), 2e-6) << "epoch " << e + 1;
    // The epoch line prints the same values, in class order.
    EXPECT_EQ(lines[e][1].str(), std::to_string(e + 1));
    EXPECT_EQ(lines[e][3].str(), std::isfinite(liver) ? fmt::format("{:.4f}", liver) : "nan") << r.output;
    EXPECT_EQ(lines[e][4].str(), std::isfinite(tumour) ? fmt::format("{:.4f}", tumour) : "nan") << r.output;
    EXPECT_GT(number(row.at("val_seconds")), 0.0);
  }
  EXPECT_NE(r.output.find(" s validation, "), std::string::npos) << r.output;
  // TensorBoard: one scalar per class (the events file holds the tag names as text).
  std::string events;
  for (const auto& f : fs::recursive_directory_iterator(run / "tensorboard")) {
    if (f.is_regular_file()) events += test::read_text(f.path());
  }
  EXPECT_NE(events.find("epoch/dice_liver"), std::string::npos);
  EXPECT_NE(events.find("epoch/dice_tumour"), std::string::npos);
}

}  // namespace
}  // namespace u3d
