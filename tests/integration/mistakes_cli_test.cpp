// Mistakes a new user makes that used to train or fail silently, caught with one line that has the
// numbers: a normalisation that leaves an input channel nearly constant or far outside ±10 (the
// preflight's warning), and `--predict-only` with a run trained for other data (the run, its task
// and channels named first, not a config key the checkpoint brought).
#include <gtest/gtest.h>

#include "expectations.h"
#include "fixtures.h"
#include "test_support.h"

namespace u3d {
namespace {

using test::contains;

class MistakesCli : public test::PhantomCli {
 protected:
  MistakesCli() : PhantomCli(4) {}
  // One short training run of the tiny config with `extra` overrides.
  test::CommandResult short_run(const std::string& name, std::vector<std::string> extra) {
    for (const char* s : {"training.epochs=1", "training.steps_per_epoch=1"}) {
      extra.insert(extra.end(), {"--set", s});
    }
    return train(name, extra);
  }
};

TEST_F(MistakesCli, PreflightWarnsWhenAChannelIsNearlyConstantOrFarOutsideTenAfterNormalisation) {
  // The tiny config's normalisation (CT clipped to [0, 1], masks as they are): no warning.
  auto r = short_run("good", {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "after data.normalize")) << r.output;

  // Raw HU under `none`: one line naming the channel, the spec, the range and the share beyond ±10.
  r = short_run("raw", {"--set", "data.normalize=[none]"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "channel 'ct' after data.normalize `none` is far outside ±10: values in [-1000"))
      << r.output;
  EXPECT_TRUE(contains(r.output, "% of ")) << r.output;
  EXPECT_FALSE(contains(r.output, "channel 'ptv' after")) << "a 0/1 mask under none is fine\n" << r.output;

  // Data already scaled (here: a divisor far too large): nearly constant, with its spread.
  r = short_run("flat", {"--set", "data.normalize=[\"scale:10000000\", none, none, none, none]"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output,
                       "channel 'ct' after data.normalize `scale:10000000` is nearly constant: standard "
                       "deviation at most "))
      << r.output;
  EXPECT_TRUE(contains(r.output, "in each of 4 case(s)") || contains(r.output, "case(s), values in")) << r.output;
}

// --predict-only checks the inputs as the checkpoint's normalisation leaves them, with the same line.
TEST_F(MistakesCli, PredictOnlyWarnsAboutTheNormalisationLikeTheTrainingPreflight) {
  auto r = short_run("good", {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"--config", "good.yaml", "--predict-only"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_FALSE(contains(r.output, "after data.normalize")) << r.output;
  r = short_run("raw", {"--set", "data.normalize=[none]"});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  r = trainer({"--config", "raw.yaml", "--predict-only"});  // the checkpoint's `none`, not the config's
  ASSERT_EQ(r.exit_code, 0) << r.output;
  EXPECT_TRUE(contains(r.output, "predict preflight (case ")) << r.output;
  EXPECT_TRUE(contains(r.output, "channel 'ct' after data.normalize `none` is far outside ±10: values in [-1000"))
      << r.output;
}

TEST_F(MistakesCli, PredictOnlyWithARunForOtherDataNamesTheRunItsTaskAndChannelsFirst) {
  auto r = short_run("dose_run", {});
  ASSERT_EQ(r.exit_code, 0) << r.output;
  test::make_phantom(dir / "seg.h5", Task::kSegmentation, 2, 16);
  r = trainer({"--config", "dose_run.yaml", "--predict-only", "--set", "data.path=seg.h5"});
  EXPECT_EQ(r.exit_code, 2) << r.output;
  EXPECT_TRUE(contains(r.output, "dose_run (checkpoint ")) << r.output;
  EXPECT_TRUE(contains(r.output, "was trained for dose on 5 input channel(s), all of p.h5's;")) << r.output;
  EXPECT_TRUE(contains(r.output, "seg.h5 is a segmentation dataset with 1 channel(s)")) << r.output;
  EXPECT_FALSE(contains(r.output, "data.normalize: 5 entries")) << "blamed the user's config\n" << r.output;
}

}  // namespace
}  // namespace u3d
