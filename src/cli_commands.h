// The command table of the command line: every command declares its options in its own file
// (src/cli_data.cpp, cli_import.cpp, cli_evaluate.cpp, cli_tools.cpp; the run family in cli_run.h)
// and registers what runs when it was parsed; src/main.cpp adds them in --help order, parses once,
// and runs the one that was given.
#pragma once
#include <CLI/CLI.hpp>

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace u3d_cli {

class Commands {
 public:
  // A command's options live in a `C` owned by the table; `run` is called with it when `app` was parsed.
  // The subcommand `name` of `parent` and its options `C`, owned by the table; `run` is called with
  // them when the subcommand was parsed.
  template <class C>
  std::pair<CLI::App*, C&> add(CLI::App& parent, const std::string& name, const std::string& description,
                               int (*run)(const C&)) {
    CLI::App* app = parent.add_subcommand(name, description);
    auto options = std::make_shared<C>();
    leaves_.emplace_back(app, [options, run] { return run(*options); });
    return {app, *options};
  }
  void add(CLI::App* app, std::function<int()> run) { leaves_.emplace_back(app, std::move(run)); }
  // What runs the parsed command; nullptr when none of the table was given (a run form, or nothing).
  const std::function<int()>* parsed() const {
    for (const auto& [app, run] : leaves_) {
      if (app->parsed()) return &run;
    }
    return nullptr;
  }

 private:
  std::vector<std::pair<CLI::App*, std::function<int()>>> leaves_;
};

// Each adds one command (or a family under one word) to `app`, in the order --help lists them.
void add_synth_command(CLI::App& app, Commands& commands);             // cli_data.cpp
void add_import_commands(CLI::App& app, Commands& commands);           // cli_import.cpp
void add_check_data_command(CLI::App& app, Commands& commands);        // cli_data.cpp
void add_plan_command(CLI::App& app, Commands& commands);              // cli_data.cpp
void add_cascade_command(CLI::App& app, Commands& commands);           // cli_data.cpp
void add_evaluate_commands(CLI::App& app, Commands& commands);         // cli_evaluate.cpp
void add_export_command(CLI::App& app, Commands& commands);            // cli_tools.cpp
void add_plot_command(CLI::App& app, Commands& commands);              // cli_tools.cpp
void add_bench_norm_command(CLI::App& app, Commands& commands);        // cli_tools.cpp
void add_config_reference_command(CLI::App& app, Commands& commands);  // cli_tools.cpp

}  // namespace u3d_cli
