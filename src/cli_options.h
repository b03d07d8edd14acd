// The command line's checks and shared options (src/main.cpp and the src/cli_*.cpp command files):
// the one range check of every numeric option, word options, thread counts, and the options that many
// commands take (--seed, --val-fraction, --test-fraction, --threads, --force), declared once here.
#pragma once
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <CLI/CLI.hpp>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "u3d/core/parallel.h"
#include "u3d/core/text.h"

namespace u3d_cli {

// --threads N: 0 (automatic) up to u3d::max_threads() (parallel.h), as the config keys that start threads.
const CLI::Validator kThreadCount(
    [](std::string& text) -> std::string {
      const auto n = u3d::parse_int(text);  // strict: the whole text is the number
      if (!n || *n < 0) return fmt::format("'{}': expected 0 or a positive integer", text);
      if (*n > u3d::max_threads()) {
        return fmt::format("{} threads is more than this machine allows: at most {} ({} per core, {} cores)", text,
                           u3d::max_threads(), u3d::kMaxThreadsPerCore, u3d::core_count());
      }
      return "";
    },
    "THREADS");

// The one range check of every numeric option: the whole text is a finite number (a whole one for an
// integer option) within [lo, hi] ((lo, hi] when `lo_open`); CLI11 puts the option's name in front.
// It runs before CLI11's conversion, so "nan", "1e15" or "abc" never reach a command, and replaces
// CLI11's range validators, whose message printed the limits of double in full (309 digits).
enum class Whole : bool { kNo = false, kYes = true };
inline CLI::Validator number_in(double lo, double hi, Whole whole, bool lo_open = false) {
  const auto bound = [whole](double v) {
    return whole == Whole::kYes ? fmt::format("{}", static_cast<int64_t>(v)) : fmt::format("{}", v);
  };
  const std::string range = fmt::format("{}{}, {}]", lo_open ? "(" : "[", bound(lo), bound(hi));
  const char* kind = whole == Whole::kYes ? "an integer" : "a number";
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        const auto v = u3d::parse_double(text);  // strict and finite: no "nan", "inf", "3x"
        const bool ok = v && (whole == Whole::kNo || (std::floor(*v) == *v && u3d::parse_int(text))) &&
                        (lo_open ? *v > lo : *v >= lo) && *v <= hi;
        return ok ? std::string() : fmt::format("'{}': expected {} in {}", text, kind, range);
      },
      fmt::format("{} in {}", whole == Whole::kYes ? "INT" : "NUMBER", range));
}
// A word option checked at parsing: "'xyz': expected one of auto, segmentation, dose" (exit 2).
inline CLI::Validator one_of(const std::vector<std::string>& words) {
  const std::string list = fmt::format("{}", fmt::join(words, ", "));
  return CLI::Validator(
      [=](std::string& text) -> std::string {
        return std::find(words.begin(), words.end(), text) != words.end()
                   ? std::string()
                   : fmt::format("'{}': expected one of {}", text, list);
      },
      "WORD");
}

constexpr double kMaxCount = 1e9;                // steps, cases: more than any run needs, far from overflow
constexpr double kMaxSeed = 9007199254740992.0;  // 2^53: every seed up to it exact as a double
constexpr double kMaxSeconds = 7 * 24 * 3600.0;
constexpr double kMaxGpuMemoryGib = 4096;  // far above any accelerator; GiB -> bytes stays exact

// The options many commands share, each with its one range rule; `doc` is the command's help text.
template <class T>
CLI::Option* add_seed(CLI::App* a, T& seed, const std::string& doc) {  // --seed: 0 .. 2^53
  return a->add_option("--seed", seed, doc)->check(number_in(0, kMaxSeed, Whole::kYes))->capture_default_str();
}
inline CLI::Option* add_fraction(CLI::App* a, const std::string& name, double& share, const std::string& doc) {
  return a->add_option(name, share, doc)->check(number_in(0, 1, Whole::kNo))->capture_default_str();
}
inline CLI::Option* add_val_fraction(CLI::App* a, double& share, const std::string& doc) {
  return add_fraction(a, "--val-fraction", share, doc);
}
inline CLI::Option* add_test_fraction(CLI::App* a, double& share, const std::string& doc) {
  return add_fraction(a, "--test-fraction", share, doc);
}
template <class T>
CLI::Option* add_threads(CLI::App* a, T& threads, const std::string& doc) {  // --threads: 0 .. max_threads()
  return a->add_option("--threads", threads, doc)->check(kThreadCount)->capture_default_str();
}
inline CLI::Option* add_force(CLI::App* a, bool& force, const std::string& doc = "Replace an existing output file") {
  return a->add_flag("--force", force, doc);
}

}  // namespace u3d_cli
