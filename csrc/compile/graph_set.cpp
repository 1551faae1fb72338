#include "opara/graph_set.h"

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <mutex>

#include "opara/error.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "runtime/cuda/cuda_streams.h"

namespace opara {
namespace {

std::string shape_text(c10::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

// "[*, 3, 224, 224]": any number of rows, then these.
std::string batched_shape_text(c10::IntArrayRef sizes) {
  std::vector<std::string> parts{"*"};
  for (std::size_t d = 1; d < sizes.size(); ++d) parts.push_back(std::to_string(sizes[d]));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

// `tensor`'s first `rows` rows, or all of them and copies of the last one up to `rows`: a padding
// row is a real row, so it computes nothing a real request could not (no NaN from zeros).
at::Tensor with_rows(const at::Tensor& tensor, std::int64_t rows) {
  const std::int64_t have = tensor.size(0);
  if (rows <= have) return tensor.narrow(0, 0, rows);
  std::vector<std::int64_t> padding = tensor.sizes().vec();
  padding[0] = rows - have;
  return at::cat({tensor, tensor.narrow(0, have - 1, 1).expand(padding)});
}

std::vector<at::Tensor> with_rows(const std::vector<at::Tensor>& inputs, const std::vector<bool>& batched,
                                  std::int64_t rows) {
  std::vector<at::Tensor> result;
  for (std::size_t i = 0; i < inputs.size(); ++i) result.push_back(batched[i] ? with_rows(inputs[i], rows) : inputs[i]);
  return result;
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

bool first_rows_agree(const at::Tensor& a, const at::Tensor& b) {
  const at::Tensor x = a.narrow(0, 0, 1).cpu();
  const at::Tensor y = b.narrow(0, 0, 1).cpu();
  if (at::isFloatingType(x.scalar_type())) return at::allclose(x.to(at::kDouble), y.to(at::kDouble), 1e-4, 1e-5);
  return at::equal(x, y);
}

}  // namespace

struct GraphSet::State {
  std::string source;
  std::vector<std::int64_t> batch_sizes;
  std::vector<int> batched_inputs;
  std::vector<bool> batched;  // by input
  std::vector<CompiledModel> buckets;
  // What run() accepts, from the examples: names, shapes (rows free where batched), dtypes, devices.
  std::vector<std::string> names;
  std::vector<std::vector<std::int64_t>> shapes;
  std::vector<c10::ScalarType> dtypes;
  std::vector<c10::Device> devices;
  c10::Device device = c10::kCPU;
  bool shared_pool = false;
  std::shared_ptr<StreamLease> streams;  // with a shared pool: the buckets' capture streams
  // With a shared pool: one bucket run at a time, each on its stream after the last one's work.
  std::mutex shared_run;
  std::optional<CudaEvent> last_run;
  mutable std::mutex counters_mutex;
  GraphSetStats counters;

  [[nodiscard]] std::size_t bucket_for(std::int64_t rows) const {
    return static_cast<std::size_t>(std::lower_bound(batch_sizes.begin(), batch_sizes.end(), rows) -
                                    batch_sizes.begin());
  }
  std::vector<at::Tensor> run_bucket(std::size_t bucket, const std::vector<at::Tensor>& inputs);
  // The rows of one call (the batched inputs' common first dimension); throws naming a bad input.
  std::int64_t check(const std::vector<at::Tensor>& inputs) const;
};

std::vector<at::Tensor> GraphSet::State::run_bucket(std::size_t bucket, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> outputs;
  if (shared_pool) {
    const std::lock_guard<std::mutex> lock(shared_run);
    const c10::cuda::CUDAGuard device_guard(device);  // the event is made and recorded on the set's device
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream(device.index());
    if (last_run) last_run->block(stream);
    outputs = buckets[bucket].run(inputs);
    if (!last_run) last_run.emplace();
    last_run->record(stream);
  } else {
    outputs = buckets[bucket].run(inputs);
  }
  const std::lock_guard<std::mutex> lock(counters_mutex);
  ++counters.bucket_runs[bucket];
  return outputs;
}

std::int64_t GraphSet::State::check(const std::vector<at::Tensor>& inputs) const {
  if (inputs.size() != names.size()) {
    throw Error(fmt::format("{}: the graph set takes {} inputs ({}), {} were given", source, names.size(),
                            fmt::join(names, ", "), inputs.size()));
  }
  std::optional<std::int64_t> rows;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const std::string where = fmt::format("{}: input {} ('{}')", source, i, names[i]);
    const std::string expected = batched[i] ? batched_shape_text(shapes[i]) : shape_text(shapes[i]);
    if (!input.defined()) throw Error(where + " is an undefined tensor");
    const bool fits = batched[i] ? input.dim() == static_cast<std::int64_t>(shapes[i].size()) &&
                                       input.sizes().slice(1) == c10::IntArrayRef(shapes[i]).slice(1)
                                 : input.sizes() == c10::IntArrayRef(shapes[i]);
    if (!fits) {
      throw Error(fmt::format("{} has shape {}; the graph set takes {}{}", where, shape_text(input.sizes()), expected,
                              batched[i] ? " (any number of rows first)" : ""));
    }
    if (input.scalar_type() != dtypes[i]) {
      throw Error(fmt::format("{} has dtype {}; the graph set takes {} {}", where, c10::toString(input.scalar_type()),
                              c10::toString(dtypes[i]), expected));
    }
    if (input.device() != devices[i]) {
      throw Error(
          fmt::format("{} is on {}; the graph set takes it on {}", where, input.device().str(), devices[i].str()));
    }
    if (!batched[i]) continue;
    if (input.size(0) == 0) throw Error(where + " has no rows");
    if (rows && *rows != input.size(0)) {
      throw Error(
          fmt::format("{} has {} rows, an earlier batched input {}: every batched input has one row per "
                      "request",
                      where, input.size(0), *rows));
    }
    rows = input.size(0);
  }
  return *rows;
}

std::vector<at::Tensor> GraphSet::run(const std::vector<at::Tensor>& inputs) const {
  State& state = *state_;
  const std::int64_t rows = state.check(inputs);
  const std::int64_t largest = state.batch_sizes.back();
  std::vector<std::vector<at::Tensor>> pieces;
  std::int64_t padded = 0;
  for (std::int64_t start = 0; start < rows; start += largest) {
    const std::int64_t count = std::min(largest, rows - start);
    const std::size_t bucket = state.bucket_for(count);
    const std::int64_t size = state.batch_sizes[bucket];
    padded += size - count;
    std::vector<at::Tensor> piece;
    for (std::size_t i = 0; i < inputs.size(); ++i) {
      piece.push_back(state.batched[i] ? with_rows(inputs[i].narrow(0, start, count), size) : inputs[i]);
    }
    std::vector<at::Tensor> outputs = state.run_bucket(bucket, piece);
    for (at::Tensor& output : outputs) output = output.narrow(0, 0, count);
    pieces.push_back(std::move(outputs));
  }
  {
    const std::lock_guard<std::mutex> lock(state.counters_mutex);
    ++state.counters.calls;
    state.counters.rows += static_cast<std::size_t>(rows);
    state.counters.padded_rows += static_cast<std::size_t>(padded);
    state.counters.split_calls += pieces.size() > 1 ? 1 : 0;
  }
  if (pieces.size() == 1) return std::move(pieces.front());
  std::vector<at::Tensor> joined;
  for (std::size_t k = 0; k < pieces.front().size(); ++k) {
    std::vector<at::Tensor> parts;
    for (const auto& piece : pieces) parts.push_back(piece[k]);
    joined.push_back(at::cat(parts));
  }
  return joined;
}

std::int64_t GraphSet::check(const std::vector<at::Tensor>& inputs) const {
  return state_->check(inputs);
}

const std::vector<std::int64_t>& GraphSet::batch_sizes() const {
  return state_->batch_sizes;
}

const std::vector<int>& GraphSet::batched_inputs() const {
  return state_->batched_inputs;
}

const CompiledModel& GraphSet::bucket(std::size_t index) const {
  return state_->buckets.at(index);
}

GraphSetStats GraphSet::stats() const {
  GraphSetStats stats;
  {
    const std::lock_guard<std::mutex> lock(state_->counters_mutex);
    stats = state_->counters;
  }
  stats.buckets.clear();
  stats.pool_bytes = 0;
  for (const CompiledModel& bucket : state_->buckets) {
    stats.buckets.push_back(bucket.stats());
    stats.pool_bytes += stats.buckets.back().pool_bytes;
  }
  return stats;
}

namespace {

std::vector<std::int64_t> checked_batch_sizes(std::vector<std::int64_t> sizes, const std::string& source) {
  if (sizes.empty()) throw Error(fmt::format("{}: a graph set needs at least one batch size", source));
  for (std::int64_t size : sizes) {
    if (size < 1) throw Error(fmt::format("{}: batch size {} is not a positive number of rows", source, size));
  }
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  return sizes;
}

// The batched inputs: as declared, or those whose first dimension is the first input's.
std::vector<int> find_batched_inputs(const std::vector<at::Tensor>& examples, const GraphSetOptions& set_options,
                                     const std::vector<std::string>& names, const std::string& source) {
  std::vector<int> batched;
  if (set_options.batched_inputs) {
    batched = *set_options.batched_inputs;
    std::sort(batched.begin(), batched.end());
    batched.erase(std::unique(batched.begin(), batched.end()), batched.end());
    for (int index : batched) {
      if (index < 0 || static_cast<std::size_t>(index) >= examples.size()) {
        throw Error(fmt::format("{}: batched input {} does not exist; the model takes {} inputs", source, index,
                                examples.size()));
      }
    }
  } else if (!examples.empty() && examples[0].defined() && examples[0].dim() >= 1) {
    for (std::size_t i = 0; i < examples.size(); ++i) {
      if (examples[i].defined() && examples[i].dim() >= 1 && examples[i].size(0) == examples[0].size(0)) {
        batched.push_back(static_cast<int>(i));
      }
    }
  }
  if (batched.empty()) {
    throw Error(
        fmt::format("{}: no input is batched: declare which inputs' first dimension is the batch "
                    "(GraphSetOptions::batched_inputs, batched_inputs=[...])",
                    source));
  }
  const std::int64_t rows = examples[batched[0]].dim() >= 1 ? examples[batched[0]].size(0) : 0;
  for (int index : batched) {
    const at::Tensor& example = examples[index];
    if (!example.defined() || example.dim() == 0 || example.size(0) == 0 || example.size(0) != rows) {
      throw Error(
          fmt::format("{}: batched input {} ('{}') has shape {}; every batched example needs the same "
                      "number of rows, at least one",
                      source, index, names[index], example.defined() ? shape_text(example.sizes()) : "none"));
    }
  }
  return batched;
}

}  // namespace

GraphSet compile_graph_set(const GraphForBatch& graph_for, const std::vector<at::Tensor>& example_inputs,
                           const GraphSetOptions& set_options, const Options& options) {
  auto state = std::make_shared<GraphSet::State>();
  const Graph first = graph_for(set_options.batch_sizes.empty() ? 1 : set_options.batch_sizes.front());
  state->source = first.source_path;
  state->batch_sizes = checked_batch_sizes(set_options.batch_sizes, state->source);
  if (example_inputs.size() != first.inputs().size()) {
    throw Error(fmt::format("{}: the model takes {} inputs, {} example inputs were given", state->source,
                            first.inputs().size(), example_inputs.size()));
  }
  for (ValueId input : first.inputs()) state->names.push_back(first.value(input).name);
  state->batched_inputs = find_batched_inputs(example_inputs, set_options, state->names, state->source);
  state->batched.assign(example_inputs.size(), false);
  for (int index : state->batched_inputs) state->batched[index] = true;
  for (int index : options.static_inputs) {
    if (index >= 0 && static_cast<std::size_t>(index) < state->batched.size() && state->batched[index]) {
      throw Error(
          fmt::format("{}: input {} ('{}') is both batched and static (read where it is): a weight has no "
                      "rows to pad",
                      state->source, index, state->names[index]));
    }
  }
  state->device = options.device ? *options.device : example_inputs[state->batched_inputs[0]].device();
  if (options.outputs == Options::Outputs::kView) {
    // Views of one bucket's buffers would be overwritten by the next call on any bucket (shared
    // pools reuse each other's memory), from any thread, before a caller could read them.
    throw Error(
        fmt::format("{}: a graph set returns outputs of the caller's own; Options::outputs = view is "
                    "not for graph sets",
                    state->source));
  }
  Options bucket_options = options;
  state->shared_pool =
      set_options.share_pool && state->device.is_cuda() && options.cuda.memory != MemoryProtection::kSmallerPool;
  std::vector<Graph> graphs;
  for (std::int64_t size : state->batch_sizes)
    graphs.push_back(size == state->batch_sizes.front() ? first : graph_for(size));
  if (state->shared_pool) {
    const c10::MempoolId_t pool = at::cuda::graph_pool_handle();
    bucket_options.cuda.memory_pool = {pool.first, pool.second};
    // Streams for the bucket that needs the most, leased before any compiles, so that every bucket
    // captures on the same ones (a smaller lease would make the larger bucket lease streams apart).
    int most_streams = 0;
    for (const Graph& graph : graphs) {
      most_streams = std::max(most_streams, make_plan(graph, options.plan).stream_count);
    }
    state->streams = lease_for_pool(state->device.index(), bucket_options.cuda.memory_pool,
                                    static_cast<std::size_t>(most_streams) + 1);
  }
  for (std::size_t i = 0; i < example_inputs.size(); ++i) {
    state->shapes.push_back(example_inputs[i].sizes().vec());
    state->dtypes.push_back(example_inputs[i].scalar_type());
    state->devices.push_back(example_inputs[i].device());
  }

  for (std::size_t bucket = 0; bucket < state->batch_sizes.size(); ++bucket) {
    const std::int64_t size = state->batch_sizes[bucket];
    const std::vector<at::Tensor> examples = with_rows(example_inputs, state->batched, size);
    const auto at_size = [&](const std::exception& error) {
      return Error(fmt::format("{}: at batch size {}: {}", state->source, size, error.what()));
    };
    try {
      state->buckets.push_back(compile(graphs[bucket], examples, bucket_options));
      const std::vector<at::Tensor> outputs = state->buckets.back().run(examples);
      for (std::size_t k = 0; k < outputs.size(); ++k) {
        if (outputs[k].dim() == 0 || outputs[k].size(0) != size) {
          throw Error(fmt::format(
              "output {} has shape {} for {} rows: it is not batched along its first dimension, so padding or "
              "splitting a call would change it. A graph set needs every output batched",
              k, shape_text(outputs[k].sizes()), size));
        }
      }
    } catch (const Error& error) {
      throw at_size(error);
    } catch (const c10::Error& error) {
      throw Error(
          fmt::format("{}: at batch size {}: {} (does the model fix its batch size in its operators? "
                      "Give a graph made at each size)",
                      state->source, size, error.what_without_backtrace()));
    }
  }

  // Rows must not mix: the first example row, run on the smallest bucket (alone when it holds one
  // row) and on the largest beside copies of itself and beside other rows, gives one result.
  const std::int64_t largest = state->batch_sizes.back();
  if (largest >= 2) {
    const std::vector<at::Tensor> first_row = with_rows(example_inputs, state->batched, 1);
    const auto run_first = [&](std::size_t bucket, bool other_rows_beside) {
      std::vector<at::Tensor> inputs = with_rows(first_row, state->batched, state->batch_sizes[bucket]);
      if (other_rows_beside) {
        for (int index : state->batched_inputs) inputs[index] = other_rows(inputs[index]);
      }
      std::vector<at::Tensor> outputs = state->buckets[bucket].run(inputs);
      for (at::Tensor& output : outputs) output = output.clone();  // views the next run would overwrite
      return outputs;
    };
    const std::size_t last = state->batch_sizes.size() - 1;
    const std::vector<at::Tensor> smallest = run_first(0, false);
    const std::vector<at::Tensor> copies = run_first(last, false);
    const std::vector<at::Tensor> others = run_first(last, true);
    for (std::size_t k = 0; k < copies.size(); ++k) {
      if (!first_rows_agree(copies[k], others[k])) {
        throw Error(
            fmt::format("{}: the outputs mix rows: output {}'s first row changed when only the other rows "
                        "did, so padding would change real results. A graph set needs rows that are "
                        "independent (eval mode, no statistics or sums over the batch)",
                        state->source, k));
      }
      if (last > 0 && !first_rows_agree(smallest[k], copies[k])) {
        throw Error(
            fmt::format("{}: output {}'s first row differs between batch sizes {} and {}: the model "
                        "depends on the batch size, so padding would change real results",
                        state->source, k, state->batch_sizes.front(), largest));
      }
    }
  }
  state->counters.batch_sizes = state->batch_sizes;
  state->counters.bucket_runs.assign(state->batch_sizes.size(), 0);
  state->counters.shared_pool = state->shared_pool;
  return GraphSet(std::move(state));
}

GraphSet compile_graph_set(const std::string& path, const std::vector<at::Tensor>& example_inputs,
                           const GraphSetOptions& set_options, const Options& options) {
  const Graph graph = load(path);
  return compile_graph_set([&graph](std::int64_t) { return graph; }, example_inputs, set_options, options);
}

}  // namespace opara
