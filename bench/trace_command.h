#pragma once

#include <CLI/CLI.hpp>

namespace opara::bench {

// `opara-bench trace --model M --modes sequential,opara --out T.json`: a Chrome / Perfetto trace
// of one run per mode, a row per stream (the picture of the Opara paper's Fig. 6).
void add_trace_command(CLI::App& app);

}  // namespace opara::bench
