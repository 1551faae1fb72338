#pragma once

#include <optional>
#include <string>
#include <vector>

#include "mode_result.h"
#include "model_loading.h"
#include "modes.h"
#include "opara/options.h"

namespace opara::bench {

struct CpuRunRequest {
  std::vector<std::string> modes;  // eager, sequential, nimble, opara, opara-noreorder
  int iters = 20;
  int warmup = 3;
  int rounds = 5;                  // modes timed in interleaved rounds (round_timing.h)
  std::optional<int> max_streams;  // unset: compile() tunes the cap; set: that cap, untuned
  // What every planned mode compiles with; each mode sets its streams and order.
  Options options;
};

// What planned mode `spec` compiles with on the CPU, from `options` (the flags'): its streams and
// order, no overflow, and the cap and threads tuned by compile() unless `max_streams` fixes the cap.
// `run` and `trace` compile so.
Options planned_cpu_options(const ModeSpec& spec, Options options, std::optional<int> max_streams);

// Sets every mode up and warms it up (round-robin, so that the first mode timed does not also pay
// for warming the process up), times the modes in interleaved rounds, then checks each mode's
// outputs against the reference (`inputs.expected`, when there is one). Prints nothing.
MeasuredModes run_cpu_modes(const LoadedModel& model, const RunInputs& inputs, const CpuRunRequest& request);

// Throws opara::Error naming the modes whose outputs are not the reference's (nor eager's at their
// thread count), and why when eager itself differs. Run after the reports are written.
void fail_on_wrong_outputs(const LoadedModel& model, const RunInputs& inputs, const std::vector<ModeResult>& modes);

}  // namespace opara::bench
