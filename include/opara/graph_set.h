#pragma once

// A graph set: one compiled graph per batch size (bucket), for a service that receives requests of
// many batch sizes (E2bird's graph per batch size, ../shared/papers/002_...).

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "opara/compiled_model.h"
#include "opara/export.h"
#include "opara/graph.h"

namespace opara {

struct GraphSetOptions {
  // The buckets: a compiled graph for each of these batch sizes (each at least 1; sorted, once each).
  std::vector<std::int64_t> batch_sizes;
  // The inputs whose first dimension is the batch. Unset: the inputs whose first dimension equals
  // the first input's (declare them when another input's first dimension only happens to). The
  // others are passed whole to every run.
  std::optional<std::vector<int>> batched_inputs;
  // CUDA: the buckets capture into one memory pool on shared streams, each reusing what the
  // others' captures freed, and their runs are serialised (one at a time, in stream order); false:
  // a pool each, and runs of different buckets may overlap. Without effect with
  // MemoryProtection::kSmallerPool (a pool each).
  bool share_pool = true;
};

struct GraphSetStats {
  std::vector<std::int64_t> batch_sizes;
  std::vector<CompiledStats> buckets;    // by bucket
  std::vector<std::size_t> bucket_runs;  // by bucket: runs, each a whole call or a piece of one
  std::size_t calls = 0;                 // run() calls
  std::size_t rows = 0;                  // rows asked for, all calls
  std::size_t padded_rows = 0;           // rows of padding run, all calls
  std::size_t split_calls = 0;           // calls of more rows than the largest bucket, run in pieces
  bool shared_pool = false;              // CUDA: the buckets share one memory pool
  std::size_t pool_bytes = 0;            // CUDA: what the buckets' captures took, all together
};

// `stats` as a JSON object: every member by its name, `buckets` a list of objects, each a bucket's
// numeric_stats() (as CompiledModel.stats() in Python) with its `device`. What the Python
// package's GraphSet.stats() returns.
OPARA_API std::string to_json(const GraphSetStats& stats);

// What compile_graph_set() returns. run() is safe to call from several threads at once: each call
// gets its own outputs. Calls that land on one bucket run one at a time (a CompiledModel does);
// on the CPU different buckets run at the same time, on CUDA too unless they share a pool.
class OPARA_API GraphSet {
 public:
  // Runs `inputs`: the batched inputs all have n >= 1 rows and otherwise the examples' shapes,
  // dtypes and devices; the others are the examples' shapes. They run on the smallest bucket of
  // at least n rows, padded by repeating the last row, and the outputs are cut back to n rows;
  // more rows than the largest bucket run in pieces of it (the last on the smallest bucket that
  // fits) and the pieces' outputs are joined. A wrong rank, trailing shape, dtype or device is an
  // opara::Error naming the input and the shape expected.
  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const;
  // What run() checks first, alone: a service refuses a bad request with this message before it
  // joins others in a batch. Returns the request's rows.
  std::int64_t check(const std::vector<at::Tensor>& inputs) const;

  [[nodiscard]] const std::vector<std::int64_t>& batch_sizes() const;
  [[nodiscard]] const std::vector<int>& batched_inputs() const;
  [[nodiscard]] GraphSetStats stats() const;
  // A bucket's compiled model, for its stats and plan: running it directly bypasses the set's
  // serialisation of buckets that share a pool.
  [[nodiscard]] const CompiledModel& bucket(std::size_t index) const;

  struct State;
  explicit GraphSet(std::shared_ptr<State> state) : state_(std::move(state)) {}

 private:
  std::shared_ptr<State> state_;
};

// The model's graph made at a batch size: the same graph for every size when the model's
// operators do not fix the batch (load(path)), one traced or exported at that size otherwise.
using GraphForBatch = std::function<Graph(std::int64_t batch_size)>;

// The buckets' rows: `sizes` ascending, each once, every one positive and at least one; else
// opara::Error naming `source` (the model). compile_graph_set decides so.
OPARA_API std::vector<std::int64_t> checked_batch_sizes(std::vector<std::int64_t> sizes, const std::string& source);
// The inputs whose first dimension is the batch, ascending: `declared` (each index checked), or
// unset, those whose first dimension equals the first input's. Each has the same number of rows,
// at least one. Errors name `source` (the model) and the input. compile_graph_set decides so.
OPARA_API std::vector<int> find_batched_inputs(const std::vector<at::Tensor>& examples,
                                               const std::optional<std::vector<int>>& declared,
                                               const std::string& source);
// `inputs` at `rows` rows, as a graph set runs them: each batched input cut to its first `rows`
// rows or padded by repeating its last row (a padding row is a real row: it computes nothing a
// request could not), the others as they are.
OPARA_API std::vector<at::Tensor> inputs_with_rows(const std::vector<at::Tensor>& inputs,
                                                   const std::vector<int>& batched, std::int64_t rows);

// Compiles a graph for each batch size, on examples cut or padded (the last row repeated) to it,
// with `options` (on CUDA the buckets share one memory pool unless set_options.share_pool is
// false; Options::outputs = view is refused: the set's outputs are the caller's own). Checks at compile time that the
// set gives what the model gives: every output must be batched (its first dimension the bucket's batch size), and the
// first example row must give one result alone on the smallest bucket (unpadded when it holds one row) and on the
// largest beside copies of itself and beside other rows: a model whose outputs mix rows (batch statistics, a sum over
// the batch) or depend on the batch size is refused, since padding would change real results. Errors name the batch
// size, the input or output, and what to do.
OPARA_API GraphSet compile_graph_set(const GraphForBatch& graph_for, const std::vector<at::Tensor>& example_inputs,
                                     const GraphSetOptions& set_options, const Options& options = {});
// One model file for every batch size.
OPARA_API GraphSet compile_graph_set(const std::string& path, const std::vector<at::Tensor>& example_inputs,
                                     const GraphSetOptions& set_options, const Options& options = {});

}  // namespace opara
