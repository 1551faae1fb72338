#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// The stream a capture begins and ends on; the Plan's streams 0..n-1 are side streams forked from it.
inline constexpr int kOriginStream = -1;

enum class CaptureStep : std::uint8_t {
  kFork,    // `stream` waits on an event recorded on the origin when capture began
  kWait,    // `stream` waits on the event recorded after `node`
  kRun,     // `node` runs with `stream` as the current stream
  kRecord,  // the event of `node` is recorded on `stream`
  kJoin,    // the origin waits on everything `stream` did so far
};

struct CaptureAction {
  CaptureStep step = CaptureStep::kRun;
  int stream = kOriginStream;
  NodeId node = kNoNode;  // kWait, kRun, kRecord
  bool operator==(const CaptureAction& other) const {
    return step == other.step && stream == other.stream && node == other.node;
  }
};

// What the CUDA graph capturer does for `plan`, in order, as data a test can read without a GPU.
// Each side stream is forked before its first action and joined at the end. The Plan's waits
// come before their node and its record after it. Nodes without a stream run just before their
// first kernel user, on that user's stream and after its waits (a view must exist before it is
// read, and whatever it touches is then ordered like its user); those no kernel reads (views
// that are outputs) run on the origin after the joins.
std::vector<CaptureAction> capture_actions(const Graph& graph, const Plan& plan);

// Every way `actions` could fail capture or race, each naming the nodes: a stream used before
// its fork or after its join, a stream never joined, a wait before its record, a node run twice
// or never or before a producer, a kernel node on another stream than the plan's. Empty when fine.
std::vector<std::string> check_capture_actions(const Graph& graph, const Plan& plan,
                                               const std::vector<CaptureAction>& actions);

std::string to_string(const CaptureAction& action);

}  // namespace opara
