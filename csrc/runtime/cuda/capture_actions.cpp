#include "runtime/cuda/capture_actions.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <utility>

namespace opara {
namespace {

class ActionBuilder {
 public:
  ActionBuilder(const Graph& graph, const Plan& plan)
      : graph_(graph), plan_(plan), done_(graph.size(), false), forked_(plan.stream_count, false) {}

  std::vector<CaptureAction> build() && {
    for (NodeId node : plan_.launch_order) {
      const int stream = plan_.stream_of[node];
      if (stream == kNoStream) continue;  // runs when a kernel first needs it
      if (!forked_[stream]) {
        forked_[stream] = true;
        actions_.push_back({CaptureStep::kFork, stream});
      }
      for (NodeId waited : plan_.waits[node]) actions_.push_back({CaptureStep::kWait, stream, waited});
      run_kernel_free_ancestors(node, stream);
      actions_.push_back({CaptureStep::kRun, stream, node});
      done_[node] = true;
      if (plan_.records[node]) actions_.push_back({CaptureStep::kRecord, stream, node});
    }
    for (int stream = 0; stream < plan_.stream_count; ++stream) {
      if (forked_[stream]) actions_.push_back({CaptureStep::kJoin, stream});
    }
    for (NodeId node : plan_.launch_order) {
      if (!done_[node]) {
        actions_.push_back({CaptureStep::kRun, kOriginStream, node});
        done_[node] = true;
      }
    }
    return std::move(actions_);
  }

 private:
  // The not yet run nodes without a stream that `node` reaches through such nodes only, in id
  // order (a topological order); kernel predecessors come earlier in launch order and have run.
  void run_kernel_free_ancestors(NodeId node, int stream) {
    std::vector<NodeId> pending;
    std::vector<NodeId> frontier{node};
    while (!frontier.empty()) {
      const NodeId current = frontier.back();
      frontier.pop_back();
      for (NodeId predecessor : graph_.node(current).predecessors) {
        if (done_[predecessor] || plan_.stream_of[predecessor] != kNoStream) continue;
        if (std::find(pending.begin(), pending.end(), predecessor) != pending.end()) continue;
        pending.push_back(predecessor);
        frontier.push_back(predecessor);
      }
    }
    std::sort(pending.begin(), pending.end());
    for (NodeId predecessor : pending) {
      actions_.push_back({CaptureStep::kRun, stream, predecessor});
      done_[predecessor] = true;
    }
  }

  const Graph& graph_;
  const Plan& plan_;
  std::vector<bool> done_;
  std::vector<bool> forked_;
  std::vector<CaptureAction> actions_;
};

}  // namespace

std::vector<CaptureAction> capture_actions(const Graph& graph, const Plan& plan) {
  return ActionBuilder(graph, plan).build();
}

std::vector<std::string> check_capture_actions(const Graph& graph, const Plan& plan,
                                               const std::vector<CaptureAction>& actions) {
  std::vector<std::string> problems;
  enum class Phase : std::uint8_t { kUnforked, kForked, kJoined };
  std::vector<Phase> phase(plan.stream_count, Phase::kUnforked);
  std::vector<int> runs(graph.size(), 0);
  std::vector<bool> recorded(graph.size(), false);
  std::set<std::pair<int, NodeId>> waited;  // (stream, node whose event it waited on)
  auto in_range = [&](int stream) { return stream == kOriginStream || (stream >= 0 && stream < plan.stream_count); };
  for (std::size_t index = 0; index < actions.size(); ++index) {
    const CaptureAction& action = actions[index];
    const std::string where = fmt::format("action {} ({})", index, to_string(action));
    if (!in_range(action.stream)) {
      problems.push_back(where + ": no such stream");
      continue;
    }
    const bool side = action.stream != kOriginStream;
    if (action.step == CaptureStep::kFork) {
      if (!side || phase[action.stream] != Phase::kUnforked)
        problems.push_back(where + ": forks twice or forks the origin");
      if (side) phase[action.stream] = Phase::kForked;
      continue;
    }
    if (action.step == CaptureStep::kJoin) {
      if (!side || phase[action.stream] != Phase::kForked)
        problems.push_back(where + ": joins a stream not forked, or twice");
      if (side) phase[action.stream] = Phase::kJoined;
      continue;
    }
    if (side && phase[action.stream] != Phase::kForked) {
      problems.push_back(where + ": uses a side stream before its fork or after its join");
    }
    if (!side && (action.step != CaptureStep::kRun || plan.stream_of[action.node] != kNoStream)) {
      problems.push_back(where + ": only nodes without a stream may run on the origin");
    }
    if (action.node < 0 || action.node >= static_cast<NodeId>(graph.size())) {
      problems.push_back(where + ": no such node");
      continue;
    }
    const std::string node = graph.describe(action.node);
    switch (action.step) {
      case CaptureStep::kWait:
        if (!recorded[action.node])
          problems.push_back(fmt::format("{}: waits on {} before its event is recorded", where, node));
        waited.insert({action.stream, action.node});
        break;
      case CaptureStep::kRecord:
        if (runs[action.node] == 0) problems.push_back(fmt::format("{}: records {} before it runs", where, node));
        recorded[action.node] = true;
        break;
      case CaptureStep::kRun: {
        const int planned = plan.stream_of[action.node];
        if (planned != kNoStream && planned != action.stream) {
          problems.push_back(fmt::format("{}: {} belongs on stream {}", where, node, planned));
        }
        if (!side && std::find(phase.begin(), phase.end(), Phase::kForked) != phase.end()) {
          problems.push_back(fmt::format("{}: runs {} on the origin while side streams are not joined", where, node));
        }
        if (planned != kNoStream) {
          for (NodeId waited_node : plan.waits[action.node]) {
            if (waited.count({action.stream, waited_node}) == 0) {
              problems.push_back(
                  fmt::format("{}: runs {} without the plan's wait on {}", where, node, graph.describe(waited_node)));
            }
          }
        }
        for (NodeId predecessor : graph.node(action.node).predecessors) {
          if (runs[predecessor] == 0) {
            problems.push_back(
                fmt::format("{}: runs {} before its predecessor {}", where, node, graph.describe(predecessor)));
          }
        }
        ++runs[action.node];
        break;
      }
      default: break;
    }
  }
  for (int stream = 0; stream < plan.stream_count; ++stream) {
    if (phase[stream] == Phase::kForked) problems.push_back(fmt::format("stream {} is never joined", stream));
  }
  for (const Node& node : graph.nodes()) {
    if (runs[node.id] != 1) problems.push_back(fmt::format("{} runs {} times", graph.describe(node.id), runs[node.id]));
  }
  return problems;
}

std::string to_string(const CaptureAction& action) {
  const std::string stream = action.stream == kOriginStream ? "origin" : fmt::format("s{}", action.stream);
  switch (action.step) {
    case CaptureStep::kFork: return fmt::format("fork {}", stream);
    case CaptureStep::kWait: return fmt::format("{} wait n{}", stream, action.node);
    case CaptureStep::kRun: return fmt::format("{} run n{}", stream, action.node);
    case CaptureStep::kRecord: return fmt::format("{} record n{}", stream, action.node);
    case CaptureStep::kJoin: return fmt::format("join {}", stream);
  }
  return "?";
}

}  // namespace opara
