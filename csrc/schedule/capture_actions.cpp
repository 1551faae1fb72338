#include "schedule/capture_actions.h"

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

namespace {

// check_capture_actions' walk: the state of every stream and node so far, one method per step.
class ActionChecker {
 public:
  ActionChecker(const Graph& graph, const Plan& plan)
      : graph_(graph),
        plan_(plan),
        phase_(plan.stream_count, Phase::kUnforked),
        runs_(graph.size(), 0),
        recorded_(graph.size(), false) {}

  void check(std::size_t index, const CaptureAction& action) {
    where_ = fmt::format("action {} ({})", index, to_string(action));
    if (action.stream != kOriginStream && (action.stream < 0 || action.stream >= plan_.stream_count)) {
      problems_.push_back(where_ + ": no such stream");
      return;
    }
    if (action.step == CaptureStep::kFork || action.step == CaptureStep::kJoin) {
      check_fork_or_join(action);
      return;
    }
    const bool side = action.stream != kOriginStream;
    if (side && phase_[action.stream] != Phase::kForked) {
      problems_.push_back(where_ + ": uses a side stream before its fork or after its join");
    }
    if (!side && (action.step != CaptureStep::kRun || plan_.stream_of[action.node] != kNoStream)) {
      problems_.push_back(where_ + ": only nodes without a stream may run on the origin");
    }
    if (action.node < 0 || action.node >= static_cast<NodeId>(graph_.size())) {
      problems_.push_back(where_ + ": no such node");
      return;
    }
    if (action.step == CaptureStep::kWait) {
      if (!recorded_[action.node])
        problems_.push_back(
            fmt::format("{}: waits on {} before its event is recorded", where_, graph_.describe(action.node)));
      waited_.insert({action.stream, action.node});
    } else if (action.step == CaptureStep::kRecord) {
      if (runs_[action.node] == 0)
        problems_.push_back(fmt::format("{}: records {} before it runs", where_, graph_.describe(action.node)));
      recorded_[action.node] = true;
    } else if (action.step == CaptureStep::kRun) {
      check_run(action);
    }
  }

  // What must hold once every action ran: each side stream joined, each node run once.
  std::vector<std::string> finish() {
    for (int stream = 0; stream < plan_.stream_count; ++stream) {
      if (phase_[stream] == Phase::kForked) problems_.push_back(fmt::format("stream {} is never joined", stream));
    }
    for (const Node& node : graph_.nodes()) {
      if (runs_[node.id] != 1)
        problems_.push_back(fmt::format("{} runs {} times", graph_.describe(node.id), runs_[node.id]));
    }
    return std::move(problems_);
  }

 private:
  enum class Phase : std::uint8_t { kUnforked, kForked, kJoined };

  void check_fork_or_join(const CaptureAction& action) {
    const bool side = action.stream != kOriginStream;
    const bool fork = action.step == CaptureStep::kFork;
    const Phase before = fork ? Phase::kUnforked : Phase::kForked;
    if (!side || phase_[action.stream] != before) {
      problems_.push_back(where_ +
                          (fork ? ": forks twice or forks the origin" : ": joins a stream not forked, or twice"));
    }
    if (side) phase_[action.stream] = fork ? Phase::kForked : Phase::kJoined;
  }

  void check_run(const CaptureAction& action) {
    const std::string node = graph_.describe(action.node);
    const int planned = plan_.stream_of[action.node];
    if (planned != kNoStream && planned != action.stream) {
      problems_.push_back(fmt::format("{}: {} belongs on stream {}", where_, node, planned));
    }
    if (action.stream == kOriginStream && std::find(phase_.begin(), phase_.end(), Phase::kForked) != phase_.end()) {
      problems_.push_back(fmt::format("{}: runs {} on the origin while side streams are not joined", where_, node));
    }
    if (planned != kNoStream) {
      for (NodeId waited_node : plan_.waits[action.node]) {
        if (waited_.count({action.stream, waited_node}) == 0) {
          problems_.push_back(
              fmt::format("{}: runs {} without the plan's wait on {}", where_, node, graph_.describe(waited_node)));
        }
      }
    }
    for (NodeId predecessor : graph_.node(action.node).predecessors) {
      if (runs_[predecessor] == 0) {
        problems_.push_back(
            fmt::format("{}: runs {} before its predecessor {}", where_, node, graph_.describe(predecessor)));
      }
    }
    ++runs_[action.node];
  }

  const Graph& graph_;
  const Plan& plan_;
  std::vector<Phase> phase_;  // by side stream
  std::vector<int> runs_;     // by node
  std::vector<bool> recorded_;
  std::set<std::pair<int, NodeId>> waited_;  // (stream, node whose event it waited on)
  std::string where_;                        // the action being checked, for messages
  std::vector<std::string> problems_;
};

}  // namespace

std::vector<std::string> check_capture_actions(const Graph& graph, const Plan& plan,
                                               const std::vector<CaptureAction>& actions) {
  ActionChecker checker(graph, plan);
  for (std::size_t index = 0; index < actions.size(); ++index) checker.check(index, actions[index]);
  return checker.finish();
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
