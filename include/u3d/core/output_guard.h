// A command never writes its output over one of its own inputs: `plan d.h5 --out d.h5 --force`,
// `import tiff --images imgs --out imgs/a.tif --force`, `evaluate openkbp --predictions p.h5 --out p.h5`
// would each destroy what they read (the staged write renames the new file over the input at the end).
//
//   refuse_output_over_input("plan", "--out", out, {data});
//     -> UsageError "plan: --out d.h5 is the input d.h5; write it elsewhere (--force replaces an
//        earlier output, never an input)"
#pragma once
#include <filesystem>
#include <string>
#include <vector>

namespace u3d {

// True when `a` and `b` name the same file (through relative paths, "..", symbolic and hard links);
// when one does not exist yet (an output the command itself writes, such as a dataset's fingerprint),
// when both resolve to the same path.
bool same_file(const std::filesystem::path& a, const std::filesystem::path& b);

// UsageError naming `command`, `flag`, the output and the input when `output` is the same file as
// one of `inputs` (same_file).
void refuse_output_over_input(const std::string& command, const std::string& flag, const std::filesystem::path& output,
                              const std::vector<std::filesystem::path>& inputs);

}  // namespace u3d
