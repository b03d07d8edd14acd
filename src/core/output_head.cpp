#include "u3d/core/output_head.h"

#include <fmt/format.h>

#include <string>

#include "u3d/core/errors.h"

namespace u3d {

int64_t network_channels(Head head, int64_t classes) { return head == Head::kSigmoid ? classes - 1 : classes; }

void validate_head(const Config& cfg) {
  const bool sigmoid = cfg.model.head == Head::kSigmoid;
  const LossSpec& loss = cfg.training.loss;
  const auto refuse = [&](const std::string& what) {
    throw ConfigError(
        fmt::format("{}: training.loss: {} needs model.head {}; with model.head {} use {}",
                    key_origin(cfg, "training.loss"), what, sigmoid ? "softmax" : "sigmoid", to_string(cfg.model.head),
                    sigmoid ? "bce, dice or [bce, dice]" : "dice_ce, ce or a list of ce, dice, cldice, ..."));
  };
  if (!loss.is_list()) {
    const bool softmax_only = loss.kind == LossKind::kDiceCe || loss.kind == LossKind::kCe;
    if (sigmoid && softmax_only) refuse(to_string(loss.kind));
    if (!sigmoid && loss.kind == LossKind::kBce) refuse("bce");
  }
  for (const auto& t : loss.terms) {
    const bool softmax_only =
        t.name == "ce" || t.name == "cldice" || t.name == "skeleton_recall" || t.name == "boundary";
    if (sigmoid && softmax_only) refuse(fmt::format("term '{}'", t.name));
    if (!sigmoid && t.name == "bce") refuse("term 'bce'");
  }
  if (sigmoid && !cfg.training.class_weights.empty()) {
    throw ConfigError(
        fmt::format("{}: training.class_weights: weights the ce term of a softmax head; model.head is "
                    "sigmoid (bce, dice): leave it empty",
                    key_origin(cfg, "training.class_weights")));
  }
}

}  // namespace u3d
