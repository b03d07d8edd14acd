// The golden nnU-Net plans (tests/data/nnunet_plans: what nnunetv2's planner wrote) and the seeded
// phantoms they were made from (tests/python/nnunet_phantoms.py), for the tests that hold the planner
// to nnU-Net's.
#pragma once
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d::test {

// tests/data/nnunet_plans/<dataset>.<kind>.json; kind "plans" or "fingerprint".
nlohmann::json nnunet_golden(const std::string& dataset, const std::string& kind);
// A plan's list of per-stage triples (strides, kernel_sizes) as (D, H, W); a 2d plan's pairs as {1, H, W}.
std::vector<Shape3> nnunet_triples(const nlohmann::json& list, bool two_d);
// The command that writes the phantoms `which` (e.g. "tiny"; "" the default three) under `out` with
// `python` (the torch venv's: numpy and nibabel).
std::string nnunet_phantoms_command(const std::filesystem::path& python, const std::filesystem::path& out,
                                    const std::string& which = "");

}  // namespace u3d::test
