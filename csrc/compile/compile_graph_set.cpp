// compile_graph_set in phases: the graphs by batch size, the inputs, the buckets' options (a shared
// pool), the buckets compiled and their outputs checked, then a probe that rows do not mix.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>

#include "compile/graph_set_state.h"
#include "exec/shape_text.h"
#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "opara/graph_set.h"
#include "opara/load.h"
#include "opara/options.h"

namespace opara {
namespace {

// The graph of each batch size, ascending, each size once; the smallest's source names the set.
std::vector<Graph> graphs_by_size(const GraphForBatch& graph_for, const std::vector<std::int64_t>& sizes,
                                  GraphSet::State& state) {
  const std::int64_t smallest = sizes.empty() ? 1 : *std::min_element(sizes.begin(), sizes.end());
  std::vector<Graph> graphs{graph_for(std::max<std::int64_t>(smallest, 1))};
  state.source = graphs.front().source_path;
  state.batch_sizes = checked_batch_sizes(sizes, state.source);
  for (std::size_t k = 1; k < state.batch_sizes.size(); ++k) graphs.push_back(graph_for(state.batch_sizes[k]));
  return graphs;
}

// A graph set runs models without state. Each bucket would keep its own copy of a buffer, padded
// rows would write into it and a call split in pieces would write it once per piece; an input
// written in place would be written in a padded copy (batched) or once per piece. There is no one
// state those writes could mean, so the set refuses them, naming the first.
void refuse_state(const Graph& graph, const std::string& source) {
  if (!graph.state().empty()) {
    throw Error(fmt::format(
        "{}: the model writes its buffer '{}' in place ({} state buffers), and a graph set runs models without "
        "state: each bucket would keep its own copy, and padded rows would write into it. Compile the model for "
        "one batch size (opara.compile / opara::compile), which keeps its state (state())",
        source, graph.state().front().name, graph.state().size()));
  }
  const std::vector<bool> written = inputs_written_in_place(graph);
  for (std::size_t i = 0; i < graph.caller_input_count(); ++i) {
    if (!written[i]) continue;
    throw Error(fmt::format(
        "{}: the model writes its input {} ('{}') in place, and a graph set runs models without state: a padded "
        "or split call would write a copy of it, or write it once per piece. Compile the model for one batch size "
        "(opara.compile / opara::compile)",
        source, i, graph.value(graph.inputs()[i]).name));
  }
}

// Which inputs are batched, and what a call must give; refuses what a graph set cannot run.
void describe_inputs(GraphSet::State& state, const Graph& graph, const std::vector<at::Tensor>& examples,
                     const GraphSetOptions& set_options, const Options& options) {
  if (examples.size() != graph.caller_input_count()) {
    throw Error(fmt::format("{}: the model takes {} inputs, {} example inputs were given", state.source,
                            graph.caller_input_count(), examples.size()));
  }
  refuse_state(graph, state.source);
  state.batched_inputs = find_batched_inputs(examples, set_options.batched_inputs, state.source);
  std::vector<bool> batched(examples.size(), false);
  for (int index : state.batched_inputs) batched[index] = true;
  for (int index : options.static_inputs) {
    if (index >= 0 && static_cast<std::size_t>(index) < batched.size() && batched[index]) {
      throw Error(
          fmt::format("{}: input {} ('{}') is both batched and static (read where it is): a weight has no "
                      "rows to pad",
                      state.source, index, graph.value(graph.inputs()[index]).name));
    }
  }
  if (options.outputs == Options::Outputs::kView) {
    // Views of one bucket's buffers would be overwritten by the next call on any bucket (shared
    // pools reuse each other's memory), from any thread, before a caller could read them.
    throw Error(
        fmt::format("{}: a graph set returns outputs of the caller's own; Options::outputs = view is "
                    "not for graph sets",
                    state.source));
  }
  state.signature.emplace(graph, examples, std::vector<int>{}, std::move(batched));
}

// The buckets' options: on CUDA with a shared pool, the pool every bucket captures into (and,
// through it, the streams they all capture on).
Options bucket_options(GraphSet::State& state, const std::vector<at::Tensor>& examples,
                       const GraphSetOptions& set_options, const Options& options) {
  const c10::Device device = model_device(options, examples, state.source);
  Options bucket = options;
  bucket.device = device;
  if (set_options.share_pool && device.is_cuda() && options.cuda.memory != MemoryProtection::kSmallerPool) {
    state.shared_pool = CapturePool::create(device.index());
    bucket.cuda.memory_pool = state.shared_pool->id();
  }
  return bucket;
}

// Every output is batched: padding or splitting a call must not change one.
void check_outputs_batched(const std::vector<at::Tensor>& outputs, std::int64_t size) {
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    if (outputs[k].dim() == 0 || outputs[k].size(0) != size) {
      throw Error(
          fmt::format("output {} has shape {} for {} rows: it is not batched along its first dimension, so padding or "
                      "splitting a call would change it. A graph set needs every output batched",
                      k, shape_text(outputs[k].sizes()), size));
    }
  }
}

void compile_buckets(GraphSet::State& state, const std::vector<Graph>& graphs, const std::vector<at::Tensor>& examples,
                     const Options& options) {
  for (std::size_t bucket = 0; bucket < state.batch_sizes.size(); ++bucket) {
    const std::int64_t size = state.batch_sizes[bucket];
    const std::vector<at::Tensor> at_size = inputs_with_rows(examples, state.batched_inputs, size);
    try {
      state.buckets.push_back(compile(graphs[bucket], at_size, options));
      check_outputs_batched(state.buckets.back().run(at_size), size);
    } catch (const Error& error) {
      throw Error(fmt::format("{}: at batch size {}: {}", state.source, size, error.what()));
    } catch (const c10::Error& error) {
      throw Error(
          fmt::format("{}: at batch size {}: {} (does the model fix its batch size in its operators? "
                      "Give a graph made at each size)",
                      state.source, size, error.what_without_backtrace()));
    }
  }
}

// Every row but the first holding other values the input could hold: floats moved away from
// themselves, integers and booleans (token ids, masks) reversed along their last dimension.
at::Tensor other_rows(const at::Tensor& tensor) {
  at::Tensor changed = tensor.clone();
  if (tensor.size(0) < 2) return changed;
  at::Tensor rest = changed.narrow(0, 1, tensor.size(0) - 1);
  if (at::isFloatingType(tensor.scalar_type())) {
    rest.mul_(-0.5).add_(1.0);
  } else if (tensor.dim() >= 2) {
    rest.copy_(rest.flip({-1}));
  }
  return changed;
}

// The rounding two kernels of one dtype may differ by, relative to the values' size.
double kernel_rounding(at::ScalarType dtype) {
  constexpr double kFloat32 = 1e-4;  // a float32 sum of a few thousand terms in another order
  switch (dtype) {
    case at::kHalf: return 8 * 0x1p-10;
    case at::kBFloat16: return 8 * 0x1p-7;
    default: return kFloat32;
  }
}

// One row, up to rounding: a GPU library chooses its kernel by the number of rows, and a kernel
// sums in its own order, so a value near zero can differ by far more than its own size allows (a
// float32 matmul of 256 terms, on an H100). Rows that mix differ by the size of the values.
bool first_rows_agree(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.narrow(0, 0, 1).cpu();
  const at::Tensor y = b.narrow(0, 0, 1).cpu();
  if (!at::isFloatingType(x.scalar_type())) return at::equal(x, y);
  if (x.numel() == 0) return x.sizes() == y.sizes();
  const at::Tensor wide_x = x.to(at::kDouble);
  const at::Tensor wide_y = y.to(at::kDouble);
  const double size = std::max(wide_x.abs().max().item<double>(), wide_y.abs().max().item<double>());
  const double rounding = kernel_rounding(x.scalar_type());
  return at::allclose(wide_x, wide_y, rounding, rounding * size + 1e-6);
}

// Rows must not mix: the first example row, run on the smallest bucket (alone when it holds one
// row) and on the largest beside copies of itself and beside other rows, gives one result.
void check_rows_independent(const GraphSet::State& state, const std::vector<at::Tensor>& examples) {
  const std::int64_t largest = state.batch_sizes.back();
  if (largest < 2) return;
  const std::vector<at::Tensor> first_row = inputs_with_rows(examples, state.batched_inputs, 1);
  const auto run_first = [&](std::size_t bucket, bool other_rows_beside) {
    std::vector<at::Tensor> inputs = inputs_with_rows(first_row, state.batched_inputs, state.batch_sizes[bucket]);
    if (other_rows_beside) {
      for (int index : state.batched_inputs) inputs[index] = other_rows(inputs[index]);
    }
    std::vector<at::Tensor> outputs = state.buckets[bucket].run(inputs);
    for (at::Tensor& output : outputs) output = output.clone();  // views the next run would overwrite
    return outputs;
  };
  const std::size_t last = state.batch_sizes.size() - 1;
  const std::vector<at::Tensor> smallest = run_first(0, false);
  const std::vector<at::Tensor> copies = run_first(last, false);
  const std::vector<at::Tensor> others = run_first(last, true);
  for (std::size_t k = 0; k < copies.size(); ++k) {
    if (!first_rows_agree(copies[k], others[k])) {
      throw Error(
          fmt::format("{}: the outputs mix rows: output {}'s first row changed when only the other rows "
                      "did, so padding would change real results. A graph set needs rows that are "
                      "independent (eval mode, no statistics or sums over the batch)",
                      state.source, k));
    }
    if (last > 0 && !first_rows_agree(smallest[k], copies[k])) {
      throw Error(
          fmt::format("{}: output {}'s first row differs between batch sizes {} and {}: the model "
                      "depends on the batch size, so padding would change real results",
                      state.source, k, state.batch_sizes.front(), largest));
    }
  }
}

}  // namespace

GraphSet compile_graph_set(const GraphForBatch& graph_for, const std::vector<at::Tensor>& example_inputs,
                           const GraphSetOptions& set_options, const Options& options) {
  auto state = std::make_shared<GraphSet::State>();
  const std::vector<Graph> graphs = graphs_by_size(graph_for, set_options.batch_sizes, *state);
  describe_inputs(*state, graphs.front(), example_inputs, set_options, options);
  compile_buckets(*state, graphs, example_inputs, bucket_options(*state, example_inputs, set_options, options));
  check_rows_independent(*state, example_inputs);
  state->counters.batch_sizes = state->batch_sizes;
  state->counters.bucket_runs.assign(state->batch_sizes.size(), 0);
  state->counters.shared_pool = state->shared_pool != nullptr;
  return GraphSet(std::move(state));
}

GraphSet compile_graph_set(const std::string& path, const std::vector<at::Tensor>& example_inputs,
                           const GraphSetOptions& set_options, const Options& options) {
  const Graph graph = load(path);
  return compile_graph_set([&graph](std::int64_t) { return graph; }, example_inputs, set_options, options);
}

}  // namespace opara
