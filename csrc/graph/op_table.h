#pragma once

#include <string_view>

namespace opara {

// What the schema of an operator cannot say about it, kept as data in one place
// (op_table.cpp). Importers combine it with the schema's alias annotations.
struct OpTraits {
  bool launches_kernel = true;    // false for containers, metadata and shape queries
  bool not_capturable = false;    // synchronises with the host (.item(), nonzero, ...)
  bool compute_bound = false;     // dense arithmetic (convolutions, matrix products); memory-bound otherwise
  bool may_copy = false;          // aliases its input when it can, copies when it cannot (reshape, contiguous)
  bool unannotated_view = false;  // returns views of its input though its schema declares no aliasing
  // Makes an uninitialised tensor (empty, empty_like): its memory is stream-ordered, so it keeps a
  // stream, yet it launches nothing, and a profile finds no kernel for it.
  bool allocates_only = false;
  // Computes each (batch, channel) plane of its one tensor argument on its own, into the same plane
  // of its one result (pooling, element-wise activations): a worker may split it along batch or
  // channels and let idle workers run pieces (node_split.h), with the same bits.
  bool splits_by_plane = false;
  // The trailing dimensions that make one plane (2 for 2-d pooling, 1 for 1-d, 0 element-wise):
  // only the dimensions before them may be cut.
  int plane_dims = 0;
  // Launches a kernel that makes no tensor: a device-side check (aten::_assert_async) that fails
  // the stream when its condition is false, without waiting for it on the host.
  bool checks_on_device = false;
  // Runs on cuBLAS on a GPU (a matrix product; an Inductor region, whose products are cuBLAS calls),
  // and LibTorch keeps a cuBLAS workspace for each stream that runs one (32 MiB on Hopper).
  bool uses_blas = false;
};

[[nodiscard]] OpTraits op_traits(std::string_view kind);

}  // namespace opara
