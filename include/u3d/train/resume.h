// What a resumed run may change. A checkpoint carries the resolved config it was trained with;
// `--resume` compares it key by key with the config given now:
//   - runtime keys (where the run folder is, threads and device, logging, the checkpoint cadence,
//     prediction settings, the NaN/Inf patience) may change freely: they do not alter what is trained;
//   - every other key (architecture, patch size, data, optimizer, schedule, epochs, ...) must be equal,
//     unless `--allow-config-change KEY[,KEY...]` names it ("training.epochs", or a whole section
//     "training.*"); otherwise the resume is refused with the list of differences.
#pragma once
#include <string>
#include <vector>

#include "u3d/core/config.h"

namespace u3d {

// The keys a resume may change without --allow-config-change.
const std::vector<std::string>& runtime_config_keys();

struct ConfigChange {
  std::string key, before, after;  // values as YAML text
};
// Every key whose value differs between `before` and `after`.
std::vector<ConfigChange> config_changes(const Config& before, const Config& after);

// Whether `key` matches one of `patterns` ("training.epochs", "training.*", "training").
bool key_matches(const std::string& key, const std::vector<std::string>& patterns);

// Checks the patterns of --allow-config-change against the option table: ConfigError naming an
// unknown key (with a suggestion).
void check_allow_patterns(const std::vector<std::string>& patterns);

// Logs each difference (runtime and allowed ones at info level) and throws ConfigError when a
// difference is neither: one line with every refused key, its old and new value, and the
// --allow-config-change argument that would accept them. `checkpoint` names the source.
void check_config_drift(const Config& saved, const Config& now, const std::vector<std::string>& allowed,
                        const std::string& checkpoint);

// The command that continues the run of `cfg` after a stop, for the stop messages: the program as
// it was started (argv[0]), `--config` with the run's config file, every `--set` override the run
// was started with (in key order; `--fold K` is its `--set experiment.fold=K`) and `--resume`.
// `replace` ("key=value", e.g. a larger training.max_minutes) takes the place of that key's
// override or is added. Arguments are quoted for a POSIX shell where they need it. A resume never
// reuses overrides on its own: they are part of the command, so what runs is what is printed.
std::string continue_command(const Config& cfg, const std::vector<std::string>& replace = {});

// SHA-256 of the training case ids (one per line, in split order): the sampler's fingerprint of
// the data it draws from.
std::string case_ids_sha256(const std::vector<std::string>& ids);

}  // namespace u3d
