// What a resume may change: runtime keys freely, others only when --allow-config-change names them.
#include <errno.h>
#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/errors.h"
#include "u3d/train/resume.h"

namespace u3d {
namespace {

Config base() { return load_config_from_string("data: {path: x.h5}\n", "test.yaml"); }

TEST(Resume, RuntimeKeysMayChangeFreely) {
  Config now = base();
  now.experiment.name = "moved";
  now.training.threads = 3;
  now.logging.progress_seconds = 5;
  now.checkpoint.every_minutes = 10;
  now.predict.overlap = 0.25;
  EXPECT_NO_THROW(check_config_drift(base(), now, {}, "c.pt"));
}

TEST(Resume, OtherChangesAreRefusedWithADiff) {
  Config now = base();
  now.training.epochs = 20;
  now.data.patch_size = {32, 32, 32};
  const std::string m =
      test::error_of<ConfigError>([&] { check_config_drift(base(), now, {}, "runs/a/checkpoints/epoch_0002.pt"); });
  ASSERT_NE(m, "no error") << "accepted a changed patch size";
  EXPECT_NE(m.find("runs/a/checkpoints/epoch_0002.pt"), std::string::npos) << m;
  EXPECT_NE(m.find("data.patch_size: [64, 64, 64] -> [32, 32, 32]"), std::string::npos) << m;
  EXPECT_NE(m.find("training.epochs: 10 -> 20"), std::string::npos) << m;
  EXPECT_NE(m.find("--allow-config-change data.patch_size,training.epochs"), std::string::npos) << m;
  EXPECT_EQ(m.find('\n'), std::string::npos) << "one line";
  EXPECT_NO_THROW(check_config_drift(base(), now, {"training.epochs", "data.patch_size"}, "c.pt"));
  EXPECT_NO_THROW(check_config_drift(base(), now, {"training.*", "data"}, "c.pt"));
  EXPECT_THROW(check_config_drift(base(), now, {"training.epochs"}, "c.pt"), ConfigError);
}

TEST(Resume, AllowPatternsAreChecked) {
  EXPECT_NO_THROW(check_allow_patterns({"training.epochs", "data.*", "model"}));
  try {
    check_allow_patterns({"training.epoch"});
    FAIL();
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("--allow-config-change: unknown key 'training.epoch' (did you mean "
                                         "'training.epochs'?)"),
              std::string::npos)
        << e.what();
  }
  EXPECT_THROW(check_allow_patterns({"trainingg.*"}), ConfigError);
}

// The stop message's command: argv[0], the run's --config, every --set it was started with (a
// replacement takes an override's place), --resume; shell-quoted where a value needs it.
TEST(Resume, ContinueCommandRepeatsConfigAndOverrides) {
  const Config cfg = load_config_from_string(
      "data: {path: x.h5}\n", "my runs/exp.yaml",
      {"training.epochs=3", "experiment.description=it's a test", "training.max_minutes=5", "training.epochs=4"});
  const std::string program = program_invocation_name;
  EXPECT_EQ(continue_command(cfg), program +
                                       " --config 'my runs/exp.yaml' --set 'experiment.description=it'\\''s a test'"
                                       " --set training.epochs=4 --set training.max_minutes=5 --resume");
  EXPECT_EQ(continue_command(cfg, {"training.max_minutes=10", "checkpoint.keep_last=1"}),
            program +
                " --config 'my runs/exp.yaml' --set checkpoint.keep_last=1 --set 'experiment.description=it'\\''s a "
                "test' --set training.epochs=4 --set training.max_minutes=10 --resume");
  // A run without overrides: the config and --resume alone.
  EXPECT_EQ(continue_command(base()), program + " --config test.yaml --resume");
}

TEST(Resume, CaseFingerprint) {
  EXPECT_EQ(case_ids_sha256({"a", "b"}), case_ids_sha256({"a", "b"}));
  EXPECT_NE(case_ids_sha256({"a", "b"}), case_ids_sha256({"b", "a"}));
  EXPECT_NE(case_ids_sha256({"ab"}), case_ids_sha256({"a", "b"}));
}

}  // namespace
}  // namespace u3d
