#pragma once

// What a GraphSet holds: compile_graph_set (compile_graph_set.cpp) fills it, GraphSet
// (graph_set.cpp) runs it.

#include <ATen/core/Tensor.h>

#include <algorithm>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "exec/input_signature.h"
#include "opara/graph_set.h"
#include "runtime/cuda/capture_pool.h"

namespace opara {

struct GraphSet::State {
  std::string source;
  std::vector<std::int64_t> batch_sizes;  // ascending, once each
  std::vector<int> batched_inputs;        // ascending
  // What run() accepts: the examples' shapes (rows free where batched), dtypes and devices.
  std::optional<InputSignature> signature;
  std::vector<CompiledModel> buckets;  // by batch size
  // CUDA, with a shared pool: the buckets capture into it on its streams, and run in turns.
  std::shared_ptr<CapturePool> shared_pool;
  mutable std::mutex counters_mutex;
  GraphSetStats counters;

  // The smallest bucket of at least `rows` rows.
  [[nodiscard]] std::size_t bucket_for(std::int64_t rows) const {
    return static_cast<std::size_t>(std::lower_bound(batch_sizes.begin(), batch_sizes.end(), rows) -
                                    batch_sizes.begin());
  }
  // Runs `inputs` (at the bucket's rows) on a bucket, in the pool's turn when the pool is shared.
  std::vector<at::Tensor> run_bucket(std::size_t bucket, const std::vector<at::Tensor>& inputs);
};

}  // namespace opara
