#pragma once

#include <CLI/CLI.hpp>

namespace opara::bench {

// `opara-bench run --model M --device cpu --modes eager --iters N`: latency and accuracy of each
// execution mode.
void add_run_command(CLI::App& app);

}  // namespace opara::bench
