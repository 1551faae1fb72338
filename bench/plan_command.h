#pragma once

#include <CLI/CLI.hpp>

namespace opara::bench {

// `opara-bench plan --model M [--allocator ...] [--order ...] [--max-streams N] [--profile P]
// [--check] [--json F] [--dot F] [--overflow none|comm_sd|manual [--alpha-us A] [--cpu-nodes LIST]]`: the schedule
// opara would run, and what it cost to make.
void add_plan_command(CLI::App& app);

}  // namespace opara::bench
