#pragma once

// The op table's classes refined by a profile's measurements: the model profiler's, not part of
// the public API.

#include <optional>
#include <vector>

#include "opara/profile.h"

namespace opara {

// What the class of one node rests on.
struct ClassEvidence {
  OpClass table_class = OpClass::kMemory;  // the op table's (or the static estimate's) class
  std::optional<double> flops;             // known for convolutions, matrix products, attention
  double bytes = 0;                        // read and written
  double gpu_ns = 0;                       // measured; 0 when it ran no kernel
};

// The op table's classes, refined by measurement: a compute-class node whose FLOPs are known is
// kept compute-bound when it used a larger share of the model's best measured FLOP rate than of
// its best measured byte rate, and demoted to memory-bound otherwise. Memory-class nodes stay.
std::vector<OpClass> refine_op_classes(const std::vector<ClassEvidence>& evidence);

}  // namespace opara
