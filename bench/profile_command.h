#pragma once

#include <CLI/CLI.hpp>

namespace opara::bench {

// `opara-bench profile --model M --out P [--runs N]`: records each node's kernels on the GPU with
// CUPTI and writes the profile (demands, classes, timings) that `plan --profile` and
// `run --profile` read. GPU only.
void add_profile_command(CLI::App& app);

}  // namespace opara::bench
