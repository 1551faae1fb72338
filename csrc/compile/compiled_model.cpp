#include "opara/compiled_model.h"

#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <functional>
#include <mutex>
#include <set>

#include "compile/cuda_capture.h"
#include "compile/overflow_choice.h"
#include "exec/eager_executor.h"
#include "exec/input_signature.h"
#include "exec/node_op.h"
#include "exec/outputs.h"
#include "exec/state_buffers.h"
#include "exec/undo_writes.h"
#include "graph/graph_analysis.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/model_profiler.h"
#include "opara/options.h"
#include "overflow/cpu_steps.h"
#include "overflow/placements.h"
#include "profiler/device_limits.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/cuda_model.h"
#include "runtime/cuda/device_memory.h"
#include "support/elapsed.h"
#include "tuning/cpu_tuning.h"

namespace opara {

struct CompiledModel::State {
  Graph graph;
  Options options;
  c10::Device device = c10::kCPU;
  std::optional<InputSignature> signature;
  std::vector<bool> host;
  std::vector<bool> written;       // by input: the model writes it in place
  std::vector<int> static_inputs;  // read (and written) where they are: Options' and, with state_in_place, the written
  std::vector<at::Tensor> state_buffers;  // the live values of Graph::state(), inputs after the caller's
  CompiledStats stats;
  Plan plan;
  std::unique_ptr<CpuParallelExecutor> cpu;
  // The pool CudaOptions::memory_pool names, kept alive for this model's captures, retries included
  // (the graphs hold it too once captured).
  std::shared_ptr<CapturePool> named_pool;
  std::unique_ptr<CudaModel> cuda;
  mutable std::mutex mutex;  // one run at a time: runs share the static buffers
};

namespace {

// Nodes the op table says cannot be captured, kept only when they read a tensor on the GPU: an
// aten::Int of a CPU scalar (a size made a tensor) synchronises with nothing. One eager run on
// the device tells.
std::vector<bool> host_nodes_on_device(const Graph& graph, const std::vector<at::Tensor>& examples,
                                       c10::Device device) {
  std::vector<bool> host = uncapturable_nodes(graph);
  if (std::none_of(host.begin(), host.end(), [](bool h) { return h; })) return host;
  std::vector<bool> reads_device(graph.size(), false);
  EagerExecutor executor(graph, device);
  executor.set_observer([&](NodeId id, const std::vector<c10::IValue>& inputs, const std::vector<c10::IValue>&) {
    for (const at::Tensor& tensor : flatten_tensors(inputs)) reads_device[id] = reads_device[id] || tensor.is_cuda();
  });
  executor.run(std::vector<c10::IValue>(examples.begin(), examples.end()));
  for (NodeId id = 0; id < static_cast<NodeId>(graph.size()); ++id) host[id] = host[id] && reads_device[id];
  return host;
}

// Copies of the examples for each compile-time run when the model writes its inputs in place: the
// caller's tensors stay as they are, and no run starts from another run's writes.
using ExamplesForARun = std::function<std::vector<at::Tensor>()>;

// `examples` with a copy of each one the model writes (`written`), but those in `kept`.
std::vector<at::Tensor> written_copied(const std::vector<at::Tensor>& examples, const std::vector<bool>& written,
                                       const std::vector<int>& kept = {}) {
  std::vector<at::Tensor> copies = examples;
  for (std::size_t i = 0; i < copies.size(); ++i) {
    if (written[i] && std::find(kept.begin(), kept.end(), static_cast<int>(i)) == kept.end()) {
      copies[i] = copies[i].clone();
    }
  }
  return copies;
}

// A tensor of our own over `tensor`'s memory, not a view of it: a view (alias()) would keep the
// caller's tensor itself alive (its base), and with it the memory's last other holder, so a cache
// the caller dropped could never be told from one still in use (InputSignature::adopt).
at::Tensor same_memory(const at::Tensor& tensor) {
  at::Tensor own = at::empty({0}, tensor.options());
  own.set_(tensor.storage(), tensor.storage_offset(), tensor.sizes(), tensor.strides());
  return own;
}

// Options::static_inputs, and with Options::state_in_place on CUDA every input of the caller's the
// model writes, ascending. (The CPU executor reads and writes every input where it is already:
// binding them would only refuse a cache made anew for the next request.)
std::vector<int> read_in_place(const Options& options, const std::vector<bool>& written, std::size_t callers,
                               c10::Device device) {
  std::set<int> indices(options.static_inputs.begin(), options.static_inputs.end());
  for (std::size_t i = 0; options.state_in_place && device.is_cuda() && i < callers; ++i) {
    if (written[i]) indices.insert(static_cast<int>(i));
  }
  return {indices.begin(), indices.end()};
}

// `examples`: the inputs as the model reads them (the caller's static inputs and the state
// buffers themselves); each compile-time run gets `examples_for_a_run()`.
void compile_cuda(CompiledModel::State& state, const std::vector<at::Tensor>& examples,
                  const ExamplesForARun& examples_for_a_run, const ModelCosts& model_costs) {
  const std::vector<NodeCost>& costs = model_costs.costs;
  const Graph& graph = state.graph;
  const Options& options = state.options;
  const c10::DeviceIndex index = state.device.index();
  if (!is_null_pool_id(options.cuda.memory_pool)) {
    state.named_pool = CapturePool::find_or_create(index, options.cuda.memory_pool);
  }
  const std::size_t before = allocated_bytes(index);
  c10::cuda::CUDACachingAllocator::resetPeakStats(index);
  // Comm+SD's estimate runs the GPU side on as many streams as the whole graph's plan opens.
  const int gpu_streams =
      options.overflow.policy == OverflowPolicy::kCommSd ? make_plan(graph, options.plan, costs).stream_count : 0;
  const OverflowChoice choice =
      choose_placement(graph, examples_for_a_run(), options.overflow, options.costs.profile, gpu_streams);
  CaptureRequest request{graph,
                         options,
                         state.device,
                         state.named_pool,
                         costs,
                         model_costs.shapes,
                         choice.placement,
                         host_nodes_on_device(graph, examples_for_a_run(), state.device),
                         {},
                         state.static_inputs,
                         state.written};
  // The caller's static inputs, then the state buffers (after the caller's inputs): the graphs
  // read and write them where they live (CudaModel's warm-ups put back what they write). Every
  // other input gets a copy, which CudaModel copies into buffers of its own.
  for (std::size_t i = graph.caller_input_count(); i < graph.inputs().size(); ++i) {
    request.read_where_they_are.push_back(static_cast<int>(i));
  }
  request.examples = written_copied(examples, state.written, request.read_where_they_are);
  request.payoff = model_costs.gpu_payoff();
  CapturedModel captured = capture_cuda_model(request, state.stats);
  state.cuda = std::move(captured.model);
  state.host = host_mask(captured.placement);
  const std::size_t peak = peak_allocated_bytes(index);
  state.stats.peak_bytes = peak > before ? peak - before : 0;
  state.stats.predicted_none_us = choice.predicted_none_us.value_or(0);
  state.stats.predicted_us = choice.predicted_us.value_or(0);
  if (choice.costs) {
    state.stats.predicted_us = estimate_makespan(graph, captured.placement, *choice.costs, choice.comm_sd.gpu_streams,
                                                 choice.comm_sd.host_threads);
  }
  state.plan = state.cuda->plan();
  state.cuda->add_stats(state.stats);
}

void compile_cpu(CompiledModel::State& state, const std::vector<NodeCost>& costs,
                 const std::vector<at::Tensor>& examples) {
  const Options& options = state.options;
  const std::vector<c10::IValue> inputs(examples.begin(), examples.end());
  state.host.assign(state.graph.size(), false);
  CpuExecutorOptions cpu_options;
  cpu_options.cpu = options.cpu;
  // Among ready streams, the one on the critical path in measured host time runs first (only the
  // order of independent nodes changes, never a result).
  PlanOptions uncapped = options.plan;
  uncapped.max_streams = 0;
  const bool branches = make_plan(state.graph, uncapped, costs).stream_count > 1;
  if (branches) cpu_options.priorities = critical_path_priorities(state.graph, inputs);
  // A plan of one stream has one schedule worth running: eager's, on the caller's threads.
  const bool tune = options.cpu.tuning_ms > 0 && options.plan.max_streams == 0 && options.cpu.intra_op_threads == 0 &&
                    branches && usable_cores() > 1;
  if (tune) {
    CpuTuningOptions tuning;
    tuning.budget_ms = options.cpu.tuning_ms;
    CpuTuning tuned = tune_cpu_executor(state.graph, options.plan, costs, inputs, cpu_options, tuning);
    state.cpu = std::move(tuned.executor);
    state.stats.plan_us = tuned.plan_us;
    state.stats.tuning_ms = tuned.tuning_ms;
    state.stats.tuning = std::move(tuned.candidates);
    state.stats.tuning_chosen = tuned.chosen;
    state.stats.tuning_timings = tuned.rounds == 0 ? 0 : tuned.timed_again ? 2 : 1;
  } else {
    const auto started = std::chrono::steady_clock::now();
    Plan plan = make_plan(state.graph, options.plan, costs);
    state.stats.plan_us = milliseconds_since(started) * 1000;
    state.cpu = std::make_unique<CpuParallelExecutor>(state.graph, std::move(plan), cpu_options);
  }
  state.plan = state.cpu->plan();
  state.stats.streams = state.plan.stream_count;
  state.stats.events = state.plan.wait_count();
  state.stats.intra_op_threads = state.cpu->intra_op_threads();
  state.stats.segments = 1;
}

// Compiling never advances state, on either device: what the compile-time runs (costs, placement,
// warm-ups, captures, the replay and the host steps' first runs that fill the CUDA graphs' outputs)
// write into the inputs read where they live (the state buffers, the static inputs) is put back,
// however the compile ends. Every other input the model writes is copied for each run
// (examples_for_a_run), so only these need a copy here.
class StateLeftAsFound {
 public:
  StateLeftAsFound(const std::vector<at::Tensor>& examples, const CompiledModel::State& state)
      : writes_(std::vector<c10::IValue>(examples.begin(), examples.end()), read_where_it_lives(state)),
        device_(state.device) {}
  ~StateLeftAsFound() {
    if (put_back_) return;
    try {
      put_back();
    } catch (const std::exception& error) {  // the compile's own failure is the one to report
      TORCH_WARN("opara: putting back the state a failed compile wrote failed too: ", error.what());
    }
  }
  StateLeftAsFound(const StateLeftAsFound&) = delete;
  StateLeftAsFound& operator=(const StateLeftAsFound&) = delete;

  // Puts the values back, done before the first run may start on any stream.
  void put_back() {
    put_back_ = true;
    writes_.undo();
    if (device_.is_cuda()) c10::cuda::getCurrentCUDAStream(device_.index()).synchronize();
  }

 private:
  // By input: written by the model and read where it lives.
  static std::vector<bool> read_where_it_lives(const CompiledModel::State& state) {
    std::vector<bool> kept(state.written.size(), false);
    for (int index : state.static_inputs) kept.at(index) = state.written.at(index);
    for (std::size_t i = state.graph.caller_input_count(); i < kept.size(); ++i) kept[i] = state.written[i];
    return kept;
  }

  UndoWrites writes_;
  c10::Device device_;
  bool put_back_ = false;
};

// InputSignature::adopt for every static input the model writes; whether each is (now) the one
// the model was compiled on.
bool adopt_written_statics(const CompiledModel::State& state, const std::vector<at::Tensor>& inputs) {
  bool adopted = true;
  for (int index : state.static_inputs) {
    const auto i = static_cast<std::size_t>(index);
    if (i < inputs.size() && state.written[i]) adopted = state.signature->adopt(i, inputs[i]) && adopted;
  }
  return adopted;
}

// Options::outputs = kClone promises tensors of the caller's own: an output that is a state
// buffer or a view of one (a decoder returning its cache) is cloned, or the caller would hold the
// model's state, changed by the next run and writable from outside. (On CUDA every output is.)
void clone_state_views(std::vector<at::Tensor>& outputs, const std::vector<at::Tensor>& state) {
  for (at::Tensor& output : outputs) {
    const bool of_state = std::any_of(state.begin(), state.end(), [&](const at::Tensor& buffer) {
      return output.defined() && output.is_alias_of(buffer);
    });
    if (of_state) output = output.clone();
  }
}

// A CPU model takes inputs compiled on another device (CUDA tensors) through copies, and gives
// them back the model's in-place writes, as eager PyTorch would have made them.
std::vector<at::Tensor> run_on_the_cpu(CompiledModel::State& state, const std::vector<at::Tensor>& inputs) {
  std::vector<c10::IValue> cpu_inputs(inputs.begin(), inputs.end());
  std::vector<std::size_t> copied;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    if (inputs[i].is_cpu()) continue;
    cpu_inputs[i] = inputs[i].cpu();
    copied.push_back(i);
  }
  std::vector<at::Tensor> outputs = flatten_tensors(state.cpu->run(cpu_inputs));
  for (std::size_t i : copied) {
    if (state.written[i]) inputs[i].copy_(cpu_inputs[i].toTensor());
  }
  return outputs;
}

// Runs `run` in the model's turn: on CUDA after the last run of every model sharing its pool (the
// CPU runs one call at a time, each done when it returns).
void in_turn(CompiledModel::State& state, const std::function<void()>& run) {
  if (state.cuda) {
    state.cuda->run_in_turn(run);
  } else {
    run();
  }
}

}  // namespace

CompiledModel compile(const Graph& graph, const std::vector<at::Tensor>& example_inputs, const Options& options) {
  const auto started = std::chrono::steady_clock::now();
  auto state = std::make_shared<CompiledModel::State>();
  state->graph = graph;
  state->options = options;
  state->device = model_device(options, example_inputs, graph.source_path);
  state->stats.device = state->device.str();
  // The examples as given define the signature run() checks, each input on its own device: a CPU
  // scalar among a CUDA model's inputs (a Python float under torch.compile) stays one.
  InputSignature{graph, example_inputs};  // count and definedness, before anything moves
  state->written = inputs_written_in_place(graph);
  const std::vector<bool>& written = state->written;
  state->static_inputs = read_in_place(options, written, graph.caller_input_count(), state->device);
  state->state_buffers = initial_state(graph, state->device);
  std::vector<at::Tensor> examples;
  for (std::size_t i = 0; i < example_inputs.size(); ++i) {
    // Not copied: every compile-time run gets copies of what the model writes (examples_for_a_run).
    examples.push_back(place_input(example_inputs[i], state->device));
  }
  std::vector<at::Tensor> signature = example_inputs;
  for (int index : state->static_inputs) {
    if (index < 0 || static_cast<std::size_t>(index) >= examples.size()) continue;  // the signature names it
    // A tensor of our own over the caller's memory (state is written there, not in a copy): the
    // caller may swap the memory under its tensor (`param.data = other`), and the graphs must not
    // read a freed block (run() then refuses the swapped tensor: another storage).
    examples[index] = same_memory(example_inputs[index]);
    signature[index] = examples[index];
    const std::string& name = graph.value(graph.inputs()[index]).name;
    if (example_inputs[index].device() != state->device) {
      throw Error(
          fmt::format("{}: static input {} ('{}') is on {}, the model runs on {}: a static input is read "
                      "where it is, so move it (the module) to {} before compiling",
                      graph.source_path, index, name, example_inputs[index].device().str(), state->device.str(),
                      state->device.str()));
    }
  }
  state->signature.emplace(graph, signature, state->static_inputs);
  // The state buffers are inputs the model feeds itself, read and written where they live.
  examples.insert(examples.end(), state->state_buffers.begin(), state->state_buffers.end());
  const ExamplesForARun examples_for_a_run = [&] { return written_copied(examples, written); };
  StateLeftAsFound state_left_as_found(examples, *state);

  const ModelCosts costs = model_costs(graph, examples, options.costs, state->device);  // copies what it writes
  if (state->device.is_cuda()) {
    compile_cuda(*state, examples, examples_for_a_run, costs);
  } else {
    // Every node runs on the CPU already; the names a manual placement gives must still exist.
    if (options.overflow.policy == OverflowPolicy::kManual) {
      choose_placement(graph, examples_for_a_run(), options.overflow, options.costs.profile, 0);
    }
    compile_cpu(*state, costs.costs, examples_for_a_run());
  }
  state_left_as_found.put_back();
  state->plan.cost_source = costs.source;
  state->stats.compile_ms = milliseconds_since(started);
  return CompiledModel(std::move(state));
}

CompiledModel compile(const std::string& path, const std::vector<at::Tensor>& example_inputs, const Options& options) {
  return compile(load(path), example_inputs, options);
}

int cpu_worker_threads(const Options& options, int streams) {
  return worker_intra_op_threads(options.cpu.intra_op_threads, streams);
}

namespace {

// One run of the model, the caller holding its mutex.
std::vector<at::Tensor> run_held(CompiledModel::State& state, const std::vector<at::Tensor>& inputs) {
  std::vector<at::Tensor> outputs;
  // One turn from adoption to the last output: adopting a new cache writes memory the last run
  // (perhaps on another stream, perhaps another model's in a shared pool) may still be using.
  in_turn(state, [&] {
    adopt_written_statics(state, inputs);
    state.signature->check(inputs);
    std::vector<at::Tensor> with_state = inputs;
    with_state.insert(with_state.end(), state.state_buffers.begin(), state.state_buffers.end());
    if (state.cpu) {
      outputs = run_on_the_cpu(state, with_state);
      if (state.options.outputs == Options::Outputs::kClone) clone_state_views(outputs, state.state_buffers);
    } else {
      outputs = state.cuda->run(with_state, state.options.outputs == Options::Outputs::kClone);
      state.stats.eager_fallbacks = state.cuda->eager_fallbacks();
      state.stats.host_ms = state.cuda->host_busy_ms();
    }
  });
  ++state.stats.runs;
  return outputs;
}

}  // namespace

std::vector<at::Tensor> CompiledModel::run(const std::vector<at::Tensor>& inputs) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return run_held(*state_, inputs);
}

std::vector<at::Tensor> CompiledModel::run_traced(const std::vector<at::Tensor>& inputs,
                                                  std::vector<NodeSpan>& spans) const {
  State& state = *state_;
  if (!state.cpu) {
    throw Error(
        fmt::format("{}: run_traced traces the CPU's schedule; on {} the nodes run inside CUDA graphs (trace "
                    "their kernels with CUPTI: opara-bench trace --device cuda)",
                    state.graph.source_path, state.device.str()));
  }
  std::lock_guard<std::mutex> lock(state.mutex);
  std::vector<NodeSpan> by_node(state.graph.size());
  const std::vector<int>& stream_of = state.plan.stream_of;
  // Each node is reported once a run, from one thread: its own slot needs no lock.
  state.cpu->set_on_node_done([&by_node, &stream_of](NodeId id, std::chrono::steady_clock::time_point start,
                                                     std::chrono::steady_clock::time_point end) {
    by_node[static_cast<std::size_t>(id)] = {id, std::max(stream_of[static_cast<std::size_t>(id)], 0), start, end};
  });
  std::vector<at::Tensor> outputs;
  try {
    outputs = run_held(state, inputs);
  } catch (...) {
    state.cpu->set_on_node_done({});
    throw;
  }
  state.cpu->set_on_node_done({});
  spans.clear();
  for (const NodeSpan& span : by_node) {
    if (span.node != kNoNode) spans.push_back(span);
  }
  return outputs;
}

const Plan& CompiledModel::plan() const {
  return state_->plan;
}

CompiledStats CompiledModel::stats() const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  return state_->stats;
}

const Graph& CompiledModel::graph() const {
  return state_->graph;
}

bool CompiledModel::adopt_state(const std::vector<at::Tensor>& inputs) const {
  std::lock_guard<std::mutex> lock(state_->mutex);
  if (inputs.size() != state_->signature->size()) return false;
  bool adopted = false;
  in_turn(*state_, [&] { adopted = adopt_written_statics(*state_, inputs); });
  return adopted;
}

std::vector<std::pair<std::string, at::Tensor>> CompiledModel::state() const {
  std::vector<std::pair<std::string, at::Tensor>> named;
  for (std::size_t i = 0; i < state_->state_buffers.size(); ++i) {
    named.emplace_back(state_->graph.state()[i].name, state_->state_buffers[i]);
  }
  return named;
}

const std::vector<int>& CompiledModel::static_inputs() const {
  return state_->static_inputs;
}

const std::vector<bool>& CompiledModel::host_nodes() const {
  return state_->host;
}

}  // namespace opara
