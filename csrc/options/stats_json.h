#pragma once

// CompiledStats as structured values: the one place that names its members. to_json(CompiledStats)
// writes it as text, numeric_stats() takes its numbers, and opara-bench copies it into its
// report, so none of them parses JSON text back.

#include <nlohmann/json.hpp>

#include "opara/options.h"

namespace opara {

// Every member under its own name, `memory` as options_from_text spells it and `tuning` as a list
// of objects (max_streams, intra_op_threads, streams, median_ms, speedup, searched_priorities,
// replay_speedup, chosen).
nlohmann::json stats_json(const CompiledStats& stats);

}  // namespace opara
