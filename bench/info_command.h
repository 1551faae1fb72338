#pragma once

#include <CLI/CLI.hpp>

namespace opara::bench {

// `opara-bench info --model M [--json F]`: the shape of a model's operator graph.
void add_info_command(CLI::App& app);

}  // namespace opara::bench
