// The op table's compute/memory classes, refined by measured duration against FLOPs and bytes.
#include <gtest/gtest.h>

#include "opara/profile.h"
#include "profile/op_class_refinement.h"

namespace opara {
namespace {

constexpr OpClass kComp = OpClass::kCompute;
constexpr OpClass kMem = OpClass::kMemory;

TEST(OpClassRefinement, DemotesAConvolutionThatMostlyMovedBytes) {
  // Best FLOP rate: node 0, 1e7 FLOPs / 1e3 ns. Best byte rate: node 1 (relu), 2e6 B / 1e3 ns.
  // Node 2: 1e6 FLOPs and 1e6 bytes in 1e3 ns: 0.1 of the best FLOP rate, 0.5 of the best byte
  // rate: memory-bound. Node 3: 8e6 FLOPs, 1e5 bytes: 0.8 against 0.05: compute-bound.
  const std::vector<ClassEvidence> evidence = {
      {kComp, 1e7, 1e5, 1e3},
      {kMem, std::nullopt, 2e6, 1e3},
      {kComp, 1e6, 1e6, 1e3},
      {kComp, 8e6, 1e5, 1e3},
  };
  EXPECT_EQ(refine_op_classes(evidence), (std::vector<OpClass>{kComp, kMem, kMem, kComp}));
}

TEST(OpClassRefinement, KeepsTheTableWhereNothingIsMeasuredOrKnown) {
  const std::vector<ClassEvidence> evidence = {
      {kComp, std::nullopt, 1e9, 1e3},  // FLOPs unknown (an einsum the estimate cannot count)
      {kComp, 1e6, 1e9, 0},             // ran no kernel
      {kMem, 1e12, 1, 1e3},             // the table's memory class stands, whatever the numbers
      {kComp, 1e6, 1e3, 1e3},           // the only judged node: it is its own best
  };
  EXPECT_EQ(refine_op_classes(evidence), (std::vector<OpClass>{kComp, kComp, kMem, kComp}));
  EXPECT_TRUE(refine_op_classes({}).empty());
}

}  // namespace
}  // namespace opara
