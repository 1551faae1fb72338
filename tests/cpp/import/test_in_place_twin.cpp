// in_place_twin (csrc/import/exported_state.h): which functional writes of state the importer runs
// in place. index_copy as index_copy_ (a KV cache's new row), add as add_ (a running total); an op
// without a twin, one that writes already, a view (whose twin changes metadata, not data) or a
// name that is no op has none.
#include <gtest/gtest.h>

#include "import/exported_state.h"

namespace opara {
namespace {

TEST(InPlaceTwin, AFunctionalWriteIsNamedByItsInPlaceTwin) {
  EXPECT_EQ(in_place_twin("torch.ops.aten.index_copy.default"), "torch.ops.aten.index_copy_.default");
  EXPECT_EQ(in_place_twin("torch.ops.aten.index_put.default"), "torch.ops.aten.index_put_.default");
  EXPECT_EQ(in_place_twin("torch.ops.aten.add.Tensor"), "torch.ops.aten.add_.Tensor");
}

TEST(InPlaceTwin, OpsWithoutOneHaveNone) {
  for (const char* target :
       {"torch.ops.aten.mm.default", "torch.ops.aten.add_.Tensor", "torch.ops.aten.no_such_op.default", "not an op"}) {
    EXPECT_EQ(in_place_twin(target), std::nullopt) << target;
  }
}

TEST(InPlaceTwin, AViewHasNone) {
  for (const char* view : {"torch.ops.aten.t.default", "torch.ops.aten.squeeze.dim", "torch.ops.aten.transpose.int"}) {
    EXPECT_EQ(in_place_twin(view), std::nullopt) << view;
  }
}

}  // namespace
}  // namespace opara
