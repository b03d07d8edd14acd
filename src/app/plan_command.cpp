// `trainer plan DATA.h5`: fingerprint the dataset (plan/fingerprint.h), plan the experiment
// (plan/planner.h) and write it as a commented YAML config (3d_fullres), a 2d one beside it
// (OUT_2d.yaml) and a low-resolution one when the planned patch covers little of the volumes.
// `--split A,B` fingerprints only those splits' cases; by default every case but the split "test"
// (planning_case_ids: the fingerprint, its statistics and the plan never see test cases).
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cstdio>
#include <set>

#include "u3d/app/commands.h"
#include "u3d/core/errors.h"
#include "u3d/core/files.h"
#include "u3d/core/json.h"
#include "u3d/core/output_guard.h"
#include "u3d/core/text.h"
#include "u3d/io/h5/dataset.h"
#include "u3d/io/h5/open_dataset.h"
#include "u3d/plan/planner.h"
#include "u3d/train/step_probe.h"

namespace u3d {
namespace {

// UsageError for an output that exists (without --force) or is a folder (--force replaces a file only).
void refuse_existing(const std::filesystem::path& path, bool force) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw UsageError(fmt::format("plan: --out {} is a folder; give the YAML file to write", path.string()));
  }
  if (std::filesystem::exists(path, ec) && !force) {
    throw UsageError(fmt::format("plan: {} exists; pass --force to replace it", path.string()));
  }
}

// The run name the config will carry: --name as given, else the data file's stem with every
// character a run name may not hold as '_' ("my scan ü" -> "my_scan_"). UsageError naming --name
// when experiment.name would refuse it (the config's own check, so the plan never names a config
// that training then refuses).
std::string run_name(const PlanCommand& cmd, const std::filesystem::path& data) {
  std::string name = cmd.name;
  if (name.empty()) {
    for (const char c : data.stem().string()) {
      const bool keep = std::isalnum(static_cast<unsigned char>(c)) || c == '-' || c == '.';
      if (keep || name.empty() || name.back() != '_') name += keep ? c : '_';
    }
    if (name.find_first_not_of("._") == std::string::npos) name = "experiment";
  }
  const std::string assignment = "experiment.name=" + json_string(name);
  try {
    Config probe;
    apply_override(probe, assignment);
  } catch (const ConfigError& e) {
    const std::string what = e.what(), prefix = "--set " + assignment + ": ";
    throw UsageError(fmt::format("plan: --name{}: {}", cmd.name.empty() ? " (from the data file's name)" : "",
                                 what.rfind(prefix, 0) == 0 ? what.substr(prefix.size()) : what));
  }
  return name;
}

// The cases of the splits `names` (--split), each once, in the order named; ConfigError naming
// --split and the splits the file has for a split it lacks or an empty one; UsageError for "test".
std::vector<std::string> split_cases(const DatasetReader& reader, const std::vector<std::string>& names) {
  std::vector<std::string> ids;
  std::set<std::string> seen;
  for (const auto& name : names) {
    if (name == "test") {
      throw UsageError(
          "plan: --split test: a plan never looks at the cases a model is scored on; name the train and val splits");
    }
    for (const auto& id : split_ids(reader, "--split", name)) {
      if (seen.insert(id).second) ids.push_back(id);
    }
  }
  return ids;
}

}  // namespace

int plan_command(const PlanCommand& cmd) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(cmd.data, ec)) {
    throw UsageError(
        fmt::format("plan: {}: no such dataset file (make one with `trainer import` or `trainer synth`)", cmd.data));
  }
  if (cmd.device != "cpu" && cmd.device != "cuda") {
    throw UsageError(fmt::format("plan: --device '{}': expected cpu (memory model) or cuda (measured)", cmd.device));
  }
  if (cmd.device == "cuda" && cmd.memory_model == "nnunet") {
    throw UsageError(
        "plan: --memory-model nnunet counts nnU-Net's feature maps and measures nothing; drop --device cuda");
  }
  if (cmd.device == "cuda" && cmd.gpu_memory_gib > 0) {
    throw UsageError("plan: --gpu-memory and --device cuda exclude each other (cuda measures the device's memory)");
  }
  if (parse_json(json_string(cmd.data), "plan").get<std::string>() != cmd.data) {  // YAML holds UTF-8 text only
    throw UsageError(
        fmt::format("plan: {}: the path is not UTF-8 text, which the YAML's data.path cannot hold; "
                    "rename the file",
                    json_string(cmd.data)));
  }
  const std::filesystem::path data(cmd.data);
  const auto out =
      cmd.out.empty() ? std::filesystem::path(data.stem().string() + "_plan.yaml") : std::filesystem::path(cmd.out);
  const auto lowres_out = out.parent_path() / (out.stem().string() + "_lowres" + out.extension().string());
  const auto out_2d = out.parent_path() / (out.stem().string() + "_2d" + out.extension().string());
  const auto cascade_out = out.parent_path() / (out.stem().string() + "_cascade" + out.extension().string());
  refuse_output_over_input("plan", "--out", out, {data, fingerprint_path(data)});
  refuse_existing(out, cmd.force);
  const std::string name = run_name(cmd, data);
  const auto t0 = std::chrono::steady_clock::now();
  const DatasetReader reader(data);
  bool computed = true;
  DatasetFingerprint fp = cmd.splits.empty()
                              ? load_or_compute_fingerprint(data, reader, cmd.threads, &computed)
                              : compute_fingerprint(reader, split_cases(reader, cmd.splits), cmd.threads);
  const std::string what =
      cmd.splits.empty()
          ? data.string()
          : fmt::format(
                "{} split(s) {} ({} cases; not stored, {} covers every case but the test "
                "split)",
                data.string(), fmt::join(cmd.splits, ", "), fp.cases.size(), fingerprint_path(data).string());
  spdlog::info("plan: fingerprint of {} {} in {:.1f} s", what,
               computed ? "computed" : "read from " + fingerprint_path(data).string(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  std::fputs(fingerprint_table(fp).c_str(), stdout);
  std::fflush(stdout);
  // A class with no voxel in the planning cases (a typo in the labels, a class only the test cases
  // hold, masks of background only) plans as any other but cannot be learnt: one line says so.
  std::vector<std::string> absent;
  for (size_t k = 1; k < fp.class_frequency.size() && k < fp.class_names.size(); ++k) {
    if (fp.class_frequency[k] <= 0) absent.push_back(fmt::format("'{}' ({})", fp.class_names[k], k));
  }
  if (!absent.empty()) {
    spdlog::warn(
        "plan: {} of {} foreground class(es) have no voxel in the {} planning case(s) (test cases are never read): {}; "
        "a network trained on them cannot learn {}",
        absent.size(), fp.class_frequency.size() - 1, fp.cases.size(), fmt::join(absent, ", "),
        absent.size() + 1 == fp.class_frequency.size() ? "anything but background" : "those classes");
  }

  PlanOptions o;
  o.dataset = data;
  o.task = cmd.task;
  o.gpu_memory_gib = cmd.gpu_memory_gib;
  o.memory_model = cmd.memory_model;
  o.recorded_normalize = reader.info().channel_normalization;
  o.renormalize = cmd.renormalize;
  o.measure_on_cuda = cmd.device == "cuda";
  o.threads = cmd.threads;
  const Plan plan = o.measure_on_cuda ? make_plan_measured(fp, o, run_training_steps) : make_plan(fp, o);
  if (plan.lowres_plan) {
    refuse_output_over_input("plan", "--out (its 3d_lowres plan)", lowres_out, {data, fingerprint_path(data)});
    refuse_existing(lowres_out, cmd.force);
  }
  if (plan.cascade_plan) {
    refuse_output_over_input("plan", "--out (its cascade plan)", cascade_out, {data, fingerprint_path(data)});
    refuse_existing(cascade_out, cmd.force);
  }
  if (plan.plan_2d) {
    refuse_output_over_input("plan", "--out (its 2d plan)", out_2d, {data, fingerprint_path(data)});
    refuse_existing(out_2d, cmd.force);
  }
  const std::string yaml = plan_yaml(plan, fp, cmd.data, name);
  load_config_from_string(yaml, out.string());  // what training loads: never write a config it refuses
  write_file_atomic(out, yaml);
  // GiB, the unit of --gpu-memory: `--gpu-memory 80` is echoed as 80 GiB (not 85.9 GB).
  constexpr double kGiB = 1024.0 * 1024.0 * 1024.0;
  if (plan.memory_model == "nnunet") {
    spdlog::info("plan: {} patch {} batch {}, {} levels, nnU-Net's memory model at {:g} GB; wrote {}",
                 plan.configuration, shape_text(plan.patch, ShapeStyle::kCross), plan.batch, plan.levels,
                 static_cast<double>(plan.budget_bytes) / kGiB, out.string());
  } else {
    spdlog::info("plan: {} patch {} batch {}, {} levels, {} step peak {:.3g} GiB of {:g} GiB ({}); wrote {}",
                 plan.configuration, shape_text(plan.patch, ShapeStyle::kCross), plan.batch, plan.levels,
                 plan.measured ? "measured" : "estimated", static_cast<double>(plan.step_bytes) / kGiB,
                 static_cast<double>(plan.budget_bytes) / kGiB,
                 plan.budget_assumed ? "assumed: pass --gpu-memory or --device cuda" : "budget", out.string());
  }
  if (plan.lowres_plan) {
    const Plan& low = *plan.lowres_plan;
    const std::string low_yaml = plan_yaml(low, fp, cmd.data, name + "_lowres");
    load_config_from_string(low_yaml, lowres_out.string());
    write_file_atomic(lowres_out, low_yaml);
    spdlog::info(
        "plan: the patch covers less than 1/4 of the median volume: also {} (3d_lowres, patch {} at "
        "{:.3g}x{:.3g}x{:.3g} mm; its header says how to import that dataset)",
        lowres_out.string(), shape_text(low.patch, ShapeStyle::kCross), low.target_spacing[0], low.target_spacing[1],
        low.target_spacing[2]);
  }
  if (plan.cascade_plan) {
    const std::string cascade_yaml = plan_yaml(*plan.cascade_plan, fp, cmd.data, name + "_cascade");
    load_config_from_string(cascade_yaml, cascade_out.string());
    write_file_atomic(cascade_out, cascade_yaml);
    spdlog::info(
        "plan: the cascade's second stage (3d_cascade_fullres, {} input channels): {}; its header gives the "
        "steps after the first stage",
        plan.cascade_plan->in_channels, cascade_out.string());
  }
  if (plan.plan_2d) {
    const Plan& two = *plan.plan_2d;
    const std::string yaml_2d = plan_yaml(two, fp, cmd.data, name + "_2d");
    load_config_from_string(yaml_2d, out_2d.string());
    write_file_atomic(out_2d, yaml_2d);
    spdlog::info("plan: 2d patch {} (slices across axis {}) batch {}, {} levels; wrote {}",
                 shape_text(two.patch, ShapeStyle::kCross), two.slice_axis, two.batch, two.levels, out_2d.string());
    spdlog::info("plan: prefers {}: {}", plan.preferred, plan.preferred_reason);
  }
  if (plan.resample_needed) {
    spdlog::warn(
        "plan: the cases are not all at the target spacing; the plan is for their grids as stored, and the YAML's "
        "header gives the `trainer import ... --spacing` that resamples them");
  }
  return kExitOk;
}

}  // namespace u3d
