#pragma once

// compile()'s captures of a model's CUDA graphs: a node that fails capture made a host step and
// the model captured again, memory=smaller-pool's two captures, and the measured choice among
// stream caps (CudaOptions::measure_ms, CudaOptions::memory_budget).

#include <ATen/core/Tensor.h>
#include <c10/core/Device.h>

#include <memory>
#include <vector>

#include "opara/graph.h"
#include "opara/options.h"
#include "opara/placement.h"
#include "opara/plan.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/cuda_model.h"

namespace opara {

// What every capture of one model is made from; `uncapturable` grows as captures fail.
struct CaptureRequest {
  const Graph& graph;
  const Options& options;
  c10::Device device;
  std::shared_ptr<CapturePool> named_pool;  // CudaOptions::memory_pool's; null: a pool per capture
  const std::vector<NodeCost>& costs;
  const std::vector<NodeShapes>& shapes;  // by node id, recorded on the examples (empty: no estimate)
  std::vector<Placement> chosen;          // the overflow choice's placement
  std::vector<bool> uncapturable;
  std::vector<at::Tensor> examples;  // the graphs' examples, written inputs copied
  std::vector<int> read_where_they_are;
  std::vector<bool> written;  // by input: the model writes it (put back between timed replays)
  StreamPayoff payoff{};      // what a stream must pay for, in the costs' units (PlanOptions::payoff)
};

struct CapturedModel {
  std::unique_ptr<CudaModel> model;
  std::vector<Placement> placement;
};

// The model captured as the options ask; `stats` gets the protection kept (and under
// smaller-pool both pools), the pool estimates and, when the candidates were measured, each one
// and the choice. Without plan.max_streams the plan's streams are first capped until its pool
// estimate fits the memory budget (stream_cap_within, of the sequential graph's estimate under a
// ratio): that plan is the one captured, or measured against fewer streams.
// Measured (CudaOptions::measure_ms above 0, no plan.max_streams, a plan of several streams):
// every candidate of cuda_stream_caps is captured in a pool of its own, a candidate whose pool is
// over the memory budget is dropped, the others' replays are timed in interleaved rounds (each
// replay from the same inputs: what one writes is put back, untimed), the rule of
// kept_candidate keeps one, and the others' pools go back to the driver. With a shared pool (or
// memory=smaller-pool) the kept candidate's plan is then captured as the options ask.
CapturedModel capture_cuda_model(CaptureRequest& request, CompiledStats& stats);

}  // namespace opara
