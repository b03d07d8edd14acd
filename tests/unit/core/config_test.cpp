#include <gtest/gtest.h>

#include "test_support.h"
#include "u3d/core/config.h"
#include "u3d/core/errors.h"

namespace u3d {
namespace {

const char* kMinimal = "data:\n  path: d.h5\n";

std::string error_of(const std::string& yaml, const std::vector<std::string>& overrides = {}) {
  try {
    load_config_from_string(yaml, "exp.yaml", overrides);
  } catch (const ConfigError& e) {
    EXPECT_EQ(e.exit_code(), 2);
    return e.what();
  }
  ADD_FAILURE() << "expected a ConfigError for:\n" << yaml;
  return "";
}

TEST(Config, DefaultsWithAPathAreValid) {
  const Config c = load_config_from_string(kMinimal, "exp.yaml");
  EXPECT_EQ(c.data.path, "d.h5");
  EXPECT_EQ(c.experiment.output_dir, "runs");
  EXPECT_EQ(c.data.patch_size, (Shape3{64, 64, 64}));
}

TEST(Config, ParsesEveryValueKind) {
  const Config c = load_config_from_string(R"(
experiment: {name: run-1, seed: 5}
data:
  path: x.h5
  patch_size: [32, 48, 64]
  channels: [ct, ptv]
  normalize: ["clip:-1000:1000", none]
  target_scale: 70
model: {levels: 3, norm: group, activation: gelu, dropout: 0.1}
training: {device: cpu, lr: 2.5e-4, betas: [0.5, 0.999], nesterov: false, lr_schedule: poly}
)",
                                           "exp.yaml");
  EXPECT_EQ(c.experiment.name, "run-1");
  EXPECT_EQ(c.experiment.seed, 5);
  EXPECT_EQ(c.data.patch_size, (Shape3{32, 48, 64}));
  EXPECT_EQ(c.data.channels, (std::vector<std::string>{"ct", "ptv"}));
  EXPECT_DOUBLE_EQ(c.data.target_scale, 70.0);
  EXPECT_EQ(c.model.norm, Norm::kGroup);
  EXPECT_EQ(c.model.activation, Activation::kGelu);
  EXPECT_EQ(c.training.device, Device::kCpu);
  EXPECT_DOUBLE_EQ(c.training.lr, 2.5e-4);
  EXPECT_EQ(c.training.betas, (std::vector<double>{0.5, 0.999}));
  EXPECT_FALSE(c.training.nesterov);
  EXPECT_EQ(c.training.lr_schedule, ScheduleKind::kPoly);
  EXPECT_EQ(c.origin.at("model.levels"), "exp.yaml:9:17");
}

TEST(Config, ScalarPatchSizeMeansACube) {
  const Config c = load_config_from_string("data: {path: d.h5, patch_size: 32}\nmodel: {levels: 3}\n", "exp.yaml");
  EXPECT_EQ(c.data.patch_size, (Shape3{32, 32, 32}));
}

TEST(Config, UnknownKeySuggestsTheNearestOne) {
  const auto msg = error_of("data:\n  path: d.h5\n  bach_size: 2\n");
  EXPECT_NE(msg.find("exp.yaml:3:3"), std::string::npos) << msg;
  EXPECT_NE(msg.find("unknown key 'data.bach_size'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'data.batch_size'"), std::string::npos) << msg;
}

TEST(Config, KeyInTheWrongSectionSuggestsTheRightSection) {
  const auto msg = error_of("data:\n  path: d.h5\ntraining:\n  batch_size: 2\n");
  EXPECT_NE(msg.find("did you mean 'data.batch_size'"), std::string::npos) << msg;
}

// Names other tools use for our keys point at ours, in the file and in --set.
TEST(Config, NamesFromOtherToolsSuggestOurKey) {
  const auto msg = error_of("data:\n  path: d.h5\ntraining:\n  learning_rate: 0.01\n");
  EXPECT_NE(msg.find("unknown key 'training.learning_rate' (did you mean 'training.lr'? 'learning_rate' is its name"),
            std::string::npos)
      << msg;
  EXPECT_NE(error_of(kMinimal, {"lr=0.01"}).find("did you mean 'training.lr'"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"epochs=5"}).find("did you mean 'training.epochs'"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"batch_size=2"}).find("did you mean 'data.batch_size'"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"trainer.max_epochs=5"}).find("did you mean 'training.epochs'"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"data.num_workers=2"}).find("did you mean 'data.workers'"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"training.batch_size=2"}).find("did you mean 'data.batch_size'"), std::string::npos);
}

TEST(Config, UnknownSectionIsAnError) {
  const auto msg = error_of("data:\n  path: d.h5\ntrainig:\n  epochs: 2\n");
  EXPECT_NE(msg.find("unknown section 'trainig'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("did you mean 'training'"), std::string::npos) << msg;
}

TEST(Config, WrongTypeNamesKeyLineAndExpectation) {
  const auto msg = error_of("data:\n  path: d.h5\n  batch_size: two\n");
  EXPECT_NE(msg.find("exp.yaml:3:15"), std::string::npos) << msg;
  EXPECT_NE(msg.find("data.batch_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("expected an integer, got \"two\""), std::string::npos) << msg;
}

TEST(Config, OutOfRangeNamesTheAllowedRange) {
  const auto msg = error_of("data:\n  path: d.h5\ntraining:\n  epochs: 0\n");
  EXPECT_NE(msg.find("training.epochs: 0 is not allowed; must be >= 1"), std::string::npos) << msg;
  const auto dropout = error_of("data: {path: d.h5}\nmodel: {dropout: 1.5}\n");
  EXPECT_NE(dropout.find("must be in [0, 1)"), std::string::npos) << dropout;
}

TEST(Config, BadEnumListsTheChoices) {
  const auto msg = error_of("data: {path: d.h5}\nmodel: {norm: layer}\n");
  EXPECT_NE(msg.find("expected one of batch|instance|group|none"), std::string::npos) << msg;
}

TEST(Config, YamlSyntaxErrorGivesLineAndColumn) {
  const auto msg = error_of("data:\n  path: [d.h5\n");
  EXPECT_NE(msg.find("YAML syntax error"), std::string::npos) << msg;
  EXPECT_NE(msg.find("exp.yaml:"), std::string::npos) << msg;
}

// A second YAML document used to be ignored: its keys never applied, silently.
TEST(Config, ASecondYamlDocumentIsAnError) {
  const auto msg = error_of("data:\n  path: d.h5\n---\ntraining:\n  epochs: 7\n");
  EXPECT_NE(msg.find("exp.yaml:4:1: a second YAML document (after '---'); a config is one document"), std::string::npos)
      << msg;
  // A leading "---" or a trailing empty document holds nothing that could be ignored.
  EXPECT_EQ(load_config_from_string("---\ndata:\n  path: d.h5\n---\n", "exp.yaml").data.path, "d.h5");
}

TEST(Config, DuplicateKeyIsAnError) {
  const auto msg = error_of("data:\n  path: d.h5\n  path: e.h5\n");
  EXPECT_NE(msg.find("appears twice"), std::string::npos) << msg;
}

TEST(Config, MissingDataPathIsAnError) {
  const auto msg = error_of("training: {epochs: 2}\n");
  EXPECT_NE(msg.find("data.path: required"), std::string::npos) << msg;
}

TEST(Config, PatchMustDivideByTheDownsampling) {
  const auto msg = error_of("data: {path: d.h5, patch_size: [64, 64, 60]}\nmodel: {levels: 4}\n");
  EXPECT_NE(msg.find("data.patch_size"), std::string::npos) << msg;
  EXPECT_NE(msg.find("must divide by [8, 8, 8]"), std::string::npos) << msg;
}

TEST(Config, BadNormalizeSpecIsAnError) {
  const auto msg = error_of("data: {path: d.h5, normalize: [\"clip:5:1\"]}\n");
  EXPECT_NE(msg.find("clip:LO:HI with LO < HI"), std::string::npos) << msg;
}

TEST(Config, OverridesApplyAfterTheFileAndAreValidated) {
  const Config c = load_config_from_string(kMinimal, "exp.yaml", {"training.epochs=3", "data.patch_size=[32,32,32]"});
  EXPECT_EQ(c.training.epochs, 3);
  EXPECT_EQ(c.data.patch_size, (Shape3{32, 32, 32}));
  EXPECT_EQ(c.origin.at("training.epochs"), "--set training.epochs=3");
  EXPECT_NE(error_of(kMinimal, {"training.epochs=-1"}).find("--set training.epochs=-1"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"training.epochz=3"}).find("did you mean 'training.epochs'"), std::string::npos);
  EXPECT_NE(error_of(kMinimal, {"training.epochs"}).find("expected key.path=value"), std::string::npos);
}

TEST(Config, MissingFileIsAConfigError) {
  try {
    load_config("/nonexistent/exp.yaml");
    FAIL() << "expected ConfigError";
  } catch (const ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent/exp.yaml not found"), std::string::npos);
  }
}

TEST(Config, YamlDumpReadsBackToTheSameConfig) {
  const Config a = load_config_from_string(
      "experiment: {name: x, description: \"a \\\"quoted\\\" text\"}\ndata: {path: d.h5, target_scale: 0.1}\n"
      "training: {lr: 0.0003, min_lr: 1e-7}\n",
      "exp.yaml");
  const Config b = load_config_from_string(to_yaml(a), "dump.yaml");
  EXPECT_TRUE(diff(a, b).empty()) << fmt::format("{}", fmt::join(diff(a, b), "\n"));
  EXPECT_EQ(b.experiment.description, "a \"quoted\" text");
  EXPECT_DOUBLE_EQ(b.training.min_lr, 1e-7);
}

// Control characters in a string survive the dump (a newline used to end the scalar early and
// break the round trip).
TEST(Config, YamlDumpKeepsNewlinesTabsAndControlCharacters) {
  Config a = load_config_from_string(kMinimal, "a.yaml");
  a.experiment.description = "line one\nline two\twith a tab\r\x01 and \\ \" done";
  const Config b = load_config_from_string(to_yaml(a), "dump.yaml");
  EXPECT_EQ(b.experiment.description, a.experiment.description);
  EXPECT_TRUE(diff(a, b).empty()) << fmt::format("{}", fmt::join(diff(a, b), "\n"));
}

TEST(Config, DiffNamesChangedKeys) {
  const Config a = load_config_from_string(kMinimal, "a.yaml");
  const Config b = load_config_from_string(kMinimal, "b.yaml", {"training.epochs=20"});
  const auto d = diff(a, b);
  ASSERT_EQ(d.size(), 1u);
  EXPECT_EQ(d[0], "training.epochs: 10 -> 20");
}

TEST(Config, DescribeAndReferenceCoverEveryKey) {
  const Config c = load_config_from_string(kMinimal, "exp.yaml");
  const auto table = describe(c);
  const auto ref = reference_markdown();
  for (const char* key : {"experiment.name", "experiment.output_dir", "experiment.seed", "data.path", "data.batch_size",
                          "data.patch_size", "model.base_filters", "model.levels", "training.epochs", "training.lr",
                          "training.device", "checkpoint.every_epochs", "checkpoint.keep_last"}) {
    EXPECT_NE(table.find(key), std::string::npos) << key;
    EXPECT_NE(ref.find(std::string("`") + key + "`"), std::string::npos) << key;
  }
  EXPECT_EQ(get_value(c, "data.patch_size"), "[64, 64, 64]");
}

TEST(Config, ShippedConfigsAreValid) {
  for (const auto& entry : std::filesystem::directory_iterator(test::source_dir() / "configs")) {
    if (entry.path().extension() != ".yaml") continue;
    EXPECT_NO_THROW(load_config(entry.path())) << entry.path();
  }
}

}  // namespace
}  // namespace u3d
