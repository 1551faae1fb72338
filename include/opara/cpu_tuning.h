#pragma once

#include <ATen/core/ivalue.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "opara/costs.h"
#include "opara/cpu_parallel_executor.h"
#include "opara/export.h"
#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

// Choosing how a plan runs on the CPU.
//
// The executor has at most one worker per core however many streams a plan opens, so which
// schedule is fastest depends on the model and the machine. Two shapes are worth trying: one
// stream on every core's intra-op threads (the eager schedule, so tuning never loses much to
// eager), or several streams of one intra-op thread each, uncapped or capped (a merged plan can
// balance better or worse than the full one). Several workers with several intra-op threads each
// are left out: each worker's OpenMP team spins while the others run, and on the 2-core machine
// that halved the speed. On that machine googlenet ran 0.77x to 1.19x eager on all its streams and
// about 1.0x on one, and branchy 1.4x on all its streams and 1.0x on one.

struct CpuShape {
  int max_streams = 0;  // the plan's cap; 0: none
  int intra_op_threads = 1;
};

// The candidates for `cores` usable CPUs: one stream on `one_stream_threads` intra-op threads
// first, then one thread per worker uncapped and capped at 2, 4, 8 .. and `cores`. One core: the
// first alone.
OPARA_API std::vector<CpuShape> cpu_shape_candidates(int cores, int one_stream_threads);

struct CpuTuningOptions {
  int warmup_runs = 3;  // untimed runs of each candidate first
  int rounds = 5;
  int runs = 10;  // timed runs of each candidate per round, at most
  // More than 0: fewer runs per round (at least one) where `runs` would make the rounds, settling
  // included, take longer than this.
  double budget_ms = 0;
  // Before each timed block, untimed runs until this has passed: the previous candidate's OpenMP
  // threads spin for milliseconds after its last parallel region (round_timing.h).
  std::chrono::milliseconds settle{20};
};

struct CpuTuningCandidate {
  CpuShape shape;
  int streams = 0;       // the plan's streams under that cap
  double median_ms = 0;  // of all its timed runs
  double speedup = 1;    // over the first candidate: the median over rounds of the ratio within a round
};

struct CpuTuning {
  std::unique_ptr<CpuParallelExecutor> executor;  // the fastest candidate's, warmed up
  std::vector<CpuTuningCandidate> candidates;
  std::size_t chosen = 0;
  int runs_per_round = 0;
  double plan_us = 0;    // planning the chosen candidate
  double tuning_ms = 0;  // all of it: planning, warming up and timing every candidate
};

// Plans `graph` with each candidate's cap (replacing plan_options.max_streams) and runs it on
// `inputs` with the candidate's intra-op threads (replacing executor_options.intra_op_threads);
// the rest of `executor_options` applies to every candidate. Candidates are timed in interleaved
// rounds, compared with the first within each round (so that a slow moment of the machine cannot
// pick for them), and the fastest is kept. Caps the policy never reaches, and every cap under the
// single-stream policy, are not tried. Inputs that a model writes in place are written by every run.
OPARA_API CpuTuning tune_cpu_executor(const Graph& graph, PlanOptions plan_options, const std::vector<NodeCost>& costs,
                                      const std::vector<c10::IValue>& inputs, CpuExecutorOptions executor_options,
                                      const CpuTuningOptions& tuning = {});

}  // namespace opara
