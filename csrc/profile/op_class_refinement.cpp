// Compute- or memory-bound, from the op table and the measured durations. The op table says which
// operators do dense arithmetic; at small sizes a convolution can still spend its time moving
// weights. A roofline needs the GPU's peak FLOP rate and bandwidth, which CUDA does not report; the
// model's own best measured rates stand in for them:
//
//   best FLOP rate: conv A 10 TFLOP/s;  best byte rate: relu B 2 TB/s
//   conv C: 1 TFLOP/s (0.1 of best) and 1 TB/s (0.5 of best)  => memory-bound
//
// Only compute-class nodes with known FLOPs are judged; the table's memory class stands.
#include <algorithm>

#include "opara/profile.h"
#include "profile/op_class_refinement.h"

namespace opara {
namespace {

bool judged(const ClassEvidence& node) {
  return node.table_class == OpClass::kCompute && node.flops && *node.flops > 0 && node.gpu_ns > 0;
}

}  // namespace

std::vector<OpClass> refine_op_classes(const std::vector<ClassEvidence>& evidence) {
  double best_flop_rate = 0;
  double best_byte_rate = 0;
  for (const ClassEvidence& node : evidence) {
    if (node.gpu_ns <= 0) continue;
    best_byte_rate = std::max(best_byte_rate, node.bytes / node.gpu_ns);
    if (judged(node)) best_flop_rate = std::max(best_flop_rate, *node.flops / node.gpu_ns);
  }
  std::vector<OpClass> classes;
  classes.reserve(evidence.size());
  for (const ClassEvidence& node : evidence) {
    if (!judged(node) || best_flop_rate <= 0 || best_byte_rate <= 0) {
      classes.push_back(node.table_class);
      continue;
    }
    const double compute_share = *node.flops / node.gpu_ns / best_flop_rate;
    const double memory_share = node.bytes / node.gpu_ns / best_byte_rate;
    classes.push_back(compute_share >= memory_share ? OpClass::kCompute : OpClass::kMemory);
  }
  return classes;
}

}  // namespace opara
