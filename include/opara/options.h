#pragma once

// What compile() takes (Options, by concern: planning, costs, CPU, CUDA, overflow) and what it
// reports (CompiledStats); Options from text for the interfaces that carry them as strings: the
// torch.classes extension (a Dict(str, str)), the Python package's keyword arguments and
// configuration files.

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "opara/export.h"
#include "opara/placement.h"
#include "opara/plan.h"

namespace opara {

// How a tensor read on another stream than the one that made it is kept from being reused by a
// later allocation while the graph is captured.
enum class MemoryProtection : std::uint8_t {
  kRecordStream,  // freed after its last reader, record_stream on every other stream that read it
  kKeepAlive,     // every intermediate is kept until the capture ends
  // compile() only: captures with each of the two above and keeps the graph whose memory pool is
  // smaller (record_stream frees earlier but holds a block until every reader's stream is done;
  // keep-alive lets the allocator plan the whole capture), the two side by side while compiling.
  kSmallerPool,
};

// CPU only: the host threads that play the streams.
struct CpuOptions {
  // Intra-op threads per worker (0: cores / streams, or tuned), and whether workers that fill the
  // usable CPUs with one intra-op thread each are pinned one to each.
  int intra_op_threads = 0;
  bool pin_workers = true;
  // A long pooling or activation node is split among idle workers when its last whole run took at
  // least this long; 0: never split.
  double split_min_us = 50;
  // compile() only: with plan.max_streams and intra_op_threads both 0 and a plan of several
  // streams, compile() times the candidate schedules on the examples (eager's: one stream on the
  // caller's intra-op threads; streams of one thread each, capped or not) for about this long,
  // three warm-up runs of each on top, and keeps eager's unless another is clearly faster, so that
  // a model whose branches do not pay for their workers runs as fast as eager. A slow model takes
  // longer: at least 3 rounds of each candidate's settling and one run. 0: no tuning, every stream
  // the plan opens, cores / streams intra-op threads. CompiledStats::tuning says what was timed.
  double tuning_ms = 1000;
};

// CUDA: how large the graphs' memory pool may be (CudaOptions::memory_budget): `bytes` when set,
// else `ratio` times the sequential graph's pool but at least that pool plus `headroom_bytes`
// (option text "1.3x", "1.3x+0", "1.3x+16MiB", "512MiB"). The headroom is there because the
// caching allocator gives each stream segments of its own (2 MiB for small tensors, 20 MiB for
// 1-10 MiB ones): under a bare 1.3x, a model whose sequential pool is one 2 MiB segment could open
// no second stream, and GoogLeNet's 24 MiB none (docs/benchmarks.md, "The CUDA pool estimate").
struct MemoryBudget {
  double ratio = 1.3;
  std::size_t bytes = 0;
  std::size_t headroom_bytes = std::size_t{64} << 20;
};

// CUDA only: capture.
struct CudaOptions {
  // kSmallerPool captures twice (compile time and, while compiling, memory double:
  // stats().peak_bytes counts both) and keeps the graph whose pool is smaller, returning the
  // other's to the driver: stats() says which and both pools.
  MemoryProtection memory = MemoryProtection::kRecordStream;
  enum class OnUncapturable : std::uint8_t {
    kSplit,  // the node runs as a host step between graph segments
    kError,  // compile() throws, naming the node
  };
  OnUncapturable on_uncapturable = OnUncapturable::kSplit;
  // Eager runs of each segment on its capture streams before capture, so that cuBLAS and cuDNN
  // handles and workspaces exist outside the graphs' memory pool. At least 2.
  int warmup_runs = 2;
  // A graph memory pool (at::cuda::graph_pool_handle(); option text memory_pool="a,b") shared with
  // other compiled models, so that each reuses what the others' captures freed; {0, 0}: a pool of
  // the model's own. Models that share a pool take turns: a run, from any thread or stream, waits on
  // the device for the last run of every model in the pool, and so does a compile into it (its
  // warm-ups and captures). An id named again after every model using it is gone names a fresh
  // pool. Not with kSmallerPool, which releases one of its two captures' pools.
  std::pair<unsigned long long, unsigned long long> memory_pool{0, 0};
  // compile() only: with plan.max_streams 0 and a plan of several streams, compile() captures the
  // candidates (one stream, i.e. the sequential graph, first; the plan capped at fewer streams; the
  // plan), times their replays in interleaved rounds for about this long, and keeps the fastest
  // unless it is not clearly faster than one stream (the CPU tuner's rule); the others' pools go
  // back to the driver. With a shared memory_pool the candidates are captured in pools of their own
  // and the one kept is captured into the shared pool. 0: the plan is captured unmeasured.
  // CompiledStats::candidates says what was timed.
  double measure_ms = 200;
  // The most the graphs' pool may take. With plan.max_streams 0 the plan's streams are first capped
  // until the pool estimated from the recorded shapes fits it (CompiledStats::budget_stream_cap); then
  // a measured candidate whose pool is over it is dropped (the sequential graph never is).
  MemoryBudget memory_budget;
};

// CUDA only: CPU overflow. kNone: every node on the GPU but those that cannot be captured, which
// run eagerly between graph segments. kCommSd (needs a full CostOptions::profile) and kManual send
// nodes to the CPU: host steps copy their inputs to pinned memory, run them on host threads and
// copy the results back, on a stream of their own, while the GPU runs the graph work they do not
// depend on. On the CPU every node runs on the CPU already: the policy is checked and changes
// nothing.
struct OverflowOptions {
  OverflowPolicy policy = OverflowPolicy::kNone;
  double alpha_us = kDefaultAlphaUs;   // Comm+SD's threshold
  std::vector<std::string> cpu_nodes;  // kManual: node ids or kinds, or one .json file {"cpu": [...]}
};

// What compile() takes, by concern: each stage is handed its own part (make_plan `plan`,
// model_costs `costs`, the CPU executor `cpu`, capture `cuda`, placement `overflow`).
struct Options {
  // Where the model runs: a CUDA device (parallel CUDA graphs) or the CPU (host threads play the
  // streams). Unset: the device of the example inputs.
  std::optional<c10::Device> device;
  // Streams and launch order. plan.max_streams 0: no cap (on the CPU: tuned, see cpu.tuning_ms).
  PlanOptions plan;
  // The launch order's demands. A recorded costs.profile must have been made for this model file,
  // the example inputs' shapes and, on CUDA, this GPU; otherwise compile() throws, naming what
  // differs, unless costs.allow_profile_mismatch (then it warns). No profile: estimated from
  // shapes recorded on the example inputs (one eager run on the CPU).
  CostOptions costs;
  CpuOptions cpu;
  CudaOptions cuda;
  OverflowOptions overflow;

  enum class Outputs : std::uint8_t {
    kClone,  // run() returns tensors of the caller's own
    kView,   // run() returns views of the static output buffers: valid until the next run()
  };
  Outputs outputs = Outputs::kClone;

  // Inputs read where they are (a module's parameters and buffers, passed as inputs): run() must
  // be given the very example tensors again, and on CUDA the graphs read their memory directly,
  // with no copy per run, so an in-place change (load_state_dict, an optimiser step) is seen by
  // the next run. Another tensor in their place (another address, shape, dtype or device) is an
  // error naming the input: compile again. They must already be on the model's device. One the
  // model writes in place (a KV cache, a counter) is state: written where it lives, by the
  // captured graphs themselves. By input index.
  std::vector<int> static_inputs;

  // CUDA: every input the model writes in place is a static input too (what torch.compile's
  // backend asks: a KV cache passed as an input is written where it lives by the captured graphs,
  // never copied per call; a new cache takes over the memory of one the caller dropped:
  // CompiledModel::adopt_state). Off: such an input
  // is copied into a buffer of the model's own and the writes copied back after each run, so any
  // tensor of the signature may be passed. The CPU reads and writes every input where it is.
  bool state_in_place = false;
};

// CPU: one schedule compile() timed while tuning (CpuOptions::tuning_ms).
struct CpuShape {
  int max_streams = 0;  // the plan's cap; 0: none
  int intra_op_threads = 1;
};

struct CpuTuningCandidate {
  CpuShape shape;
  int streams = 0;       // the plan's streams under that cap
  double median_ms = 0;  // of all its timed runs (with a single candidate: of its warm-up runs)
  double speedup = 1;    // over the first candidate: the median over rounds of the ratio within a round
  // Its priorities were searched (the candidate before it has the same plan with the given ones);
  // the replay's mean run time with the given priorities over that with the searched ones.
  bool searched_priorities = false;
  double replay_speedup = 1;
};

// CUDA: one captured candidate compile() timed (CudaOptions::measure_ms).
struct CudaCandidate {
  int max_streams = 0;                  // the plan's cap (1: the sequential graph; 0: none)
  int streams = 0;                      // the most streams of any graph segment under that cap
  double median_ms = 0;                 // of its timed replays
  double speedup = 1;                   // over the sequential graph: the median over rounds of the ratio within a round
  std::size_t pool_bytes = 0;           // its graphs' memory pool
  bool over_budget = false;             // its pool and workspaces were over CudaOptions::memory_budget: dropped
  std::size_t pool_estimate_bytes = 0;  // its pool, estimated from the recorded shapes before capture
  std::size_t workspace_bytes = 0;      // the cuBLAS workspaces its pool holds, outside it (CompiledStats)
  std::size_t workspace_estimate_bytes = 0;  // those, estimated before capture (estimate_blas_workspaces)
};

struct CompiledStats {
  std::string device;
  int streams = 0;                  // the most streams of any graph segment
  std::size_t events = 0;           // cross-stream waits, all segments
  std::size_t captured_nodes = 0;   // nodes captured in CUDA graphs
  std::size_t graph_nodes = 0;      // nodes of the CUDA graphs (kernels, copies, memsets)
  std::size_t segments = 0;         // graph segments and host steps
  std::size_t host_nodes = 0;       // nodes run in host steps
  std::size_t cpu_nodes = 0;        // of those, nodes run on the CPU (host steps holding a kCpu node)
  std::size_t bytes_to_host = 0;    // bytes each run copies device-to-host for the CPU nodes
  std::size_t bytes_to_device = 0;  // and back
  double host_ms = 0;               // host steps' time on the host, all runs together
  // Comm+SD's estimates of one run (0: not estimated): everything on the GPU, and the placement.
  double predicted_none_us = 0;
  double predicted_us = 0;
  double compile_ms = 0;       // planning, warm-up and capture
  double plan_us = 0;          // planning alone
  int intra_op_threads = 0;    // CPU: each worker's
  double tuning_ms = 0;        // CPU: choosing the schedule (CpuOptions::tuning_ms), planning included
  double capture_ms = 0;       // capture and instantiation, all segments
  std::size_t pool_bytes = 0;  // CUDA: the graphs' memory pool
  // CUDA: the protection the graphs were captured with (under kSmallerPool, the one kept) and,
  // under kSmallerPool, the pool each one took.
  MemoryProtection memory = MemoryProtection::kRecordStream;
  std::size_t pool_bytes_record_stream = 0;
  std::size_t pool_bytes_keep_alive = 0;
  // CUDA: the cuBLAS and cuBLASLt workspaces the graphs' pool holds, outside the pool: one of each
  // per capture stream that ran a matrix product (32 MiB for cuBLAS on Hopper), kept while the
  // graphs live. The memory budget bounds them with the pool.
  std::size_t workspace_bytes = 0;
  // CUDA: most bytes allocated at once while compiling, weights and buffers included. Measuring it
  // resets the device's peak statistics (torch.cuda.reset_peak_memory_stats): a peak measured
  // around compile() by the caller starts there.
  std::size_t peak_bytes = 0;
  std::size_t runs = 0;             // calls of run()
  std::size_t eager_fallbacks = 0;  // runs where a host step's result no longer fitted the captured graphs
  // CPU: the schedules tuning timed, the first eager's (empty: not tuned), and the one kept.
  std::vector<CpuTuningCandidate> tuning;
  std::size_t tuning_chosen = 0;
  // CPU: how often the candidates were timed: 0 untimed (one candidate, or not tuned), 1, or 2 when
  // one of the two measures alone said a candidate was clearly faster and all were timed once more.
  int tuning_timings = 0;
  // CUDA: the candidates measured (empty: not measured), the sequential graph first, the one kept,
  // the time capturing and timing them took, and the budget their pools were held to.
  std::vector<CudaCandidate> candidates;
  std::size_t candidate_chosen = 0;
  double measure_ms = 0;
  // CUDA: the memory budget in bytes (CudaOptions::memory_budget) for the graphs' pool and cuBLAS
  // workspaces together, of what the measured sequential graph holds when candidates were
  // measured, else of its estimate.
  std::size_t memory_budget_bytes = 0;
  // CUDA: the pool estimated from the recorded shapes under the caching allocator's rules (0: no
  // shapes), of the plan captured and of the sequential graph, the cuBLAS workspaces estimated for
  // the plan captured, and the cap the estimates put on the plan's streams to fit the budget (0:
  // none needed, or the caller's max_streams stands).
  std::size_t pool_estimate_bytes = 0;
  std::size_t sequential_pool_estimate_bytes = 0;
  std::size_t workspace_estimate_bytes = 0;
  int budget_stream_cap = 0;
};

// `stats` as a JSON object: every member by its name, `memory` as options_from_text spells it,
// `tuning` as a list of objects (max_streams, intra_op_threads, streams, median_ms, speedup,
// searched_priorities, replay_speedup, chosen) and `candidates` as one (max_streams, streams,
// median_ms, speedup, pool_bytes, over_budget, pool_estimate_bytes, workspace_bytes,
// workspace_estimate_bytes, chosen). What opara-bench reports and the Python
// package's stats() reads.
OPARA_API std::string to_json(const CompiledStats& stats);

// The numbers of to_json(stats) by name, in its key order, and `keep_alive` (1 when the graphs were
// captured with MemoryProtection::kKeepAlive, else 0) standing for `memory`, which is text: what the
// Python package's CompiledModel.stats() returns.
OPARA_API std::vector<std::pair<std::string, double>> numeric_stats(const CompiledStats& stats);

// The options under which compile() makes again the schedule its tuning (CPU: the kept candidate's
// cap and intra-op threads) or measuring (CUDA: the kept cap, or the plan unmeasured) chose,
// without timing anything: what a warm start (a compile cache hit, a later shape of one dynamic
// graph) adds to the caller's options. Empty when nothing was chosen. Searched priorities are not
// among them: the schedule comes back with critical-path priorities.
OPARA_API std::map<std::string, std::string> chosen_schedule_options(const CompiledStats& stats);

// "record-stream", "keep-alive" or "smaller-pool", as options_from_text takes them.
OPARA_API std::string_view to_string(MemoryProtection memory);

// Keys are flat, the members' own names ("streams", "max_streams", "profile", "intra_op_threads",
// "memory", "overflow" for OverflowOptions::policy, "cpu_tuning_ms" for CpuOptions::tuning_ms, ...;
// option_keys() lists them); values as the command line spells them ("nimble", "4", "keep-alive", "cuda:0"). Throws
// opara::Error naming the key and the values it accepts for an unknown key or a bad value.
OPARA_API Options options_from_text(const std::map<std::string, std::string>& text);

// The keys options_from_text accepts, in documentation order.
OPARA_API std::vector<std::string> option_keys();

// Where a model compiles and plans: Options::device, else where the CUDA examples are (a Dynamo
// graph of a CUDA model may begin with a CPU scalar), else where the others are, else the CPU. A
// CUDA device always carries its index (the current device when none was named). The one rule
// for compile(), compile_graph_set() and the plan op. Throws opara::Error naming `source` (the
// model's file) for a device opara does not run on, and for CUDA where no GPU is visible.
OPARA_API c10::Device model_device(const Options& options, const std::vector<at::Tensor>& examples,
                                   const std::string& source);

}  // namespace opara
