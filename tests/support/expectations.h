// Checks the suites repeat, written once: a function of a string against a table of inputs and the
// outputs expected, and a command's exit code with the text it must print. Header-only, so that a
// suite includes it without rebuilding the others.
#pragma once
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "test_support.h"

namespace u3d::test {

// `needle` stands in `text`.
inline bool contains(const std::string& text, const std::string& needle) {
  return text.find(needle) != std::string::npos;
}

// fn(input) == expected for each {input, expected} of `table`; a failure names the input.
template <class Fn>
void expect_outputs(Fn fn, const std::vector<std::pair<std::string, std::string>>& table) {
  for (const auto& [input, expected] : table) EXPECT_EQ(fn(input), expected) << "input: " << input;
}

// fn(input) == output for each output of `groups` and each input listed with it (the inputs that
// fall into one class, e.g. the operator names of one profile category); a failure names the input.
template <class Fn>
void expect_classes(Fn fn, const std::vector<std::pair<std::string, std::vector<std::string>>>& groups) {
  for (const auto& [output, inputs] : groups) {
    for (const auto& input : inputs) EXPECT_EQ(fn(input), output) << "input: " << input;
  }
}

// `r` exited with `exit_code` and its output holds `needle` ("": any output); each check prints the
// output when it fails.
inline void expect_exit(const CommandResult& r, int exit_code, const std::string& needle = "") {
  EXPECT_EQ(r.exit_code, exit_code) << r.output;
  EXPECT_NE(r.output.find(needle), std::string::npos) << r.output;
}

}  // namespace u3d::test
