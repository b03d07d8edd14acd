// The trainer's commands, called by src/main.cpp after parsing. Each returns the exit code and
// lets u3d::Error propagate (main maps it to a one-line message and its exit code).
#pragma once
#include <optional>
#include <string>
#include <vector>

namespace u3d {

struct RunCommand {
  std::string config;                  // --config
  std::vector<std::string> overrides;  // --set key=value, in order
  std::optional<std::string> resume;   // --resume [CHECKPOINT]; "" = newest
  bool predict_only = false;           // --predict-only
  std::string checkpoint = "best";     // --checkpoint best|last|PATH (with --predict-only)
  // --benchmark [KIND]: "data" runs the batch pipeline alone (benchmark.h); "" (no value) is the
  // training-step benchmark (not implemented yet: exit 2).
  std::optional<std::string> benchmark;
  std::string workers;                 // --workers 1,2,4 (with --benchmark data)
  double benchmark_seconds = 3.0;      // --benchmark-seconds: measured time per benchmark row
};
int run_command(const RunCommand& cmd);

struct SynthCommand {
  std::string task = "dose";  // dose|segmentation
  int64_t cases = 24;
  std::string size = "32";    // "S" or "D,H,W"
  std::string out;
  uint64_t seed = 0;
  double val_fraction = 0.25;
  double test_fraction = 0.0;
  bool force = false;         // replace an existing file
};
int synth_command(const SynthCommand& cmd);

// Prints the configuration reference (Markdown) to stdout.
int config_reference_command();

}  // namespace u3d
