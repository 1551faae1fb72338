#include <algorithm>
#include <chrono>

#include "exec/eager_executor.h"
#include "exec/undo_writes.h"
#include "graph/graph_analysis.h"
#include "runtime/cpu/cpu_parallel_executor.h"

namespace opara {

std::vector<double> critical_path_priorities(const Graph& graph, const std::vector<c10::IValue>& arguments) {
  std::vector<double> seconds(graph.size(), 0);  // the fastest of three runs, per node
  EagerExecutor executor(graph, c10::kCPU);
  // Each timing run starts from the state the caller gave: a counter or cache written in place
  // must not be advanced by runs the model never asked for.
  const UndoWrites writes(arguments, inputs_written_in_place(graph));
  for (int round = 0; round < 3; ++round) {
    auto last = std::chrono::steady_clock::now();
    executor.set_observer([&](NodeId id, const auto&, const auto&) {
      const auto now = std::chrono::steady_clock::now();
      const double elapsed = std::chrono::duration<double>(now - last).count();
      seconds[id] = round == 0 ? elapsed : std::min(seconds[id], elapsed);
      last = now;
    });
    executor.run(arguments);
    writes.undo();
  }
  return remaining_path_lengths(graph, seconds);
}

}  // namespace opara
