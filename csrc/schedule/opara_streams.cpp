// Opara's stream allocation (Alg. 1 of the paper), and the variant its published code moved to.
//
// Paper: visiting nodes in order, a node takes the stream of the first of its predecessors of
// which it is the first successor; failing that it opens a stream. Each predecessor has one first
// successor, so a stream is handed on at most once and every stream is a path.
//
// Later rule: a node takes the stream of its first predecessor that has not handed its stream on
// yet, whether or not the node is that predecessor's first successor. They differ when a node's
// first successor inherits elsewhere:
//
//   q -> s1, p -> s1, p -> s2   (s1 reads q first)
//   paper:     s1 takes q's stream; s2 is not p's first successor: a third stream
//   unhanded:  s1 takes q's stream; p has not handed on, so s2 takes p's: two streams
#include "schedule/stages.h"

namespace opara {

StreamAssignment opara_streams(const KernelDag& dag, const std::vector<NodeId>& order, bool unhanded_rule) {
  StreamAssignment result;
  result.stream_of.assign(dag.launches_kernel.size(), kNoStream);
  std::vector<std::uint8_t> handed(unhanded_rule ? dag.launches_kernel.size() : 0, 0);
  for (NodeId node : order) {
    if (!dag.is_kernel(node)) continue;
    int& stream = result.stream_of[node];
    for (NodeId predecessor : dag.predecessors[node]) {
      const bool inherit = unhanded_rule ? !handed[predecessor] : dag.successors[predecessor].front() == node;
      if (inherit) {
        stream = result.stream_of[predecessor];
        if (unhanded_rule) handed[predecessor] = 1;
        break;
      }
    }
    if (stream == kNoStream) stream = result.stream_count++;
  }
  return result;
}

}  // namespace opara
