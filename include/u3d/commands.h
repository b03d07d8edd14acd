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
  std::vector<std::string> allow_config_change;  // --allow-config-change KEY[,KEY...] (with --resume)
  // --benchmark [KIND]: "data" runs the batch pipeline alone; "" (no value) or "step" times the
  // training step (benchmark.h).
  std::optional<std::string> benchmark;
  int64_t steps = 20;                  // --steps: timed steps (with --benchmark step)
  int64_t warmup = 5;                  // --warmup: untimed steps first (with --benchmark step)
  bool steps_given = false;            // --steps or --warmup was passed
  std::string workers;                 // --workers 1,2,4 (with --benchmark data)
  double benchmark_seconds = 3.0;      // --benchmark-seconds: measured time per benchmark row
};
// Exit code 0, or 128 + signal when a stop signal ended training early (after its checkpoint).
int run_command(const RunCommand& cmd);

struct CheckDataCommand {
  std::string file;     // dataset (HDF5, format v1)
  std::string split;    // only this split's cases; empty: every case in the file
  int64_t threads = 0;  // 0: cores - 1
};
// `trainer check-data FILE`: reads every case in full and prints each problem (file, case, field)
// and a summary. Exit 0 when no case has an error (warnings allowed), 1 otherwise.
int check_data_command(const CheckDataCommand& cmd);

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
