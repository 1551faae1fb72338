#pragma once

// CompiledStats as the extension hands it to Python: every number, by name.

#include <ATen/core/Dict.h>

#include <string>

#include "opara/compiled_model.h"

namespace opara::ext {

inline c10::Dict<std::string, double> stats_dict(const CompiledStats& stats) {
  c10::Dict<std::string, double> dict;
  auto put = [&dict](const char* key, double value) { dict.insert(key, value); };
  put("streams", stats.streams);
  put("events", static_cast<double>(stats.events));
  put("captured_nodes", static_cast<double>(stats.captured_nodes));
  put("graph_nodes", static_cast<double>(stats.graph_nodes));
  put("segments", static_cast<double>(stats.segments));
  put("host_nodes", static_cast<double>(stats.host_nodes));
  put("cpu_nodes", static_cast<double>(stats.cpu_nodes));
  put("bytes_to_host", static_cast<double>(stats.bytes_to_host));
  put("bytes_to_device", static_cast<double>(stats.bytes_to_device));
  put("host_ms", stats.host_ms);
  put("predicted_none_us", stats.predicted_none_us);
  put("predicted_us", stats.predicted_us);
  put("compile_ms", stats.compile_ms);
  put("plan_us", stats.plan_us);
  put("intra_op_threads", stats.intra_op_threads);
  put("tuning_ms", stats.tuning_ms);
  put("capture_ms", stats.capture_ms);
  put("pool_bytes", static_cast<double>(stats.pool_bytes));
  put("keep_alive", stats.memory == MemoryProtection::kKeepAlive ? 1 : 0);
  put("pool_bytes_record_stream", static_cast<double>(stats.pool_bytes_record_stream));
  put("pool_bytes_keep_alive", static_cast<double>(stats.pool_bytes_keep_alive));
  put("peak_bytes", static_cast<double>(stats.peak_bytes));
  put("runs", static_cast<double>(stats.runs));
  put("eager_fallbacks", static_cast<double>(stats.eager_fallbacks));
  return dict;
}

}  // namespace opara::ext
