#pragma once

#include <ATen/core/ivalue.h>

#include <chrono>
#include <cstddef>
#include <memory>
#include <vector>

#include "opara/graph.h"
#include "opara/options.h"
#include "opara/plan.h"
#include "runtime/cpu/cpu_parallel_executor.h"
#include "tuning/measured_choice.h"

namespace opara {

// Choosing how a plan runs on the CPU.
//
// The executor has at most one worker per core however many streams a plan opens, so which
// schedule is fastest depends on the model and the machine. The shapes worth trying: one stream
// on the caller's intra-op threads (eager's schedule, so tuning never loses much to eager), and
// streams of one intra-op thread each, uncapped or capped (a merged plan can balance better or
// worse than the full one), plus the uncapped plan with cores / streams threads each where that
// is more than one. Workers whose OpenMP teams together outnumber the cores are left out: each
// team spins while the others run, taking their cores. Which candidate wins differs by model:
// a branchy block gains from all its streams where a model of heavy sequential layers does not,
// so the candidates are timed, not predicted.

// CpuShape and CpuTuningCandidate: opara/options.h (CompiledStats::tuning reports them).

// The candidates for `cores` usable CPUs and a plan of `uncapped_streams` streams: one stream on
// `one_stream_threads` intra-op threads first; with more than one core and more than one stream,
// one thread per worker uncapped and capped at 2, 4, 8 .. and `cores` (caps below the stream
// count only), and the uncapped plan on cores / streams threads each when that is 2 or more.
std::vector<CpuShape> cpu_shape_candidates(int cores, int one_stream_threads, int uncapped_streams);

struct CpuTuningOptions {
  int warmup_runs = 3;  // untimed runs of each candidate first
  int rounds = 5;       // at least 1
  int runs = 10;        // timed runs of each candidate per round, at most; at least 1
  // More than 0: fewer runs per round where `runs` would make the rounds, settling included, take
  // longer than this, then fewer rounds, down to 3 rounds of one run each (at least 3 x candidates
  // x (settle + 2 runs)).
  double budget_ms = 0;
  // A candidate replaces the first (eager's schedule) only when it is this much faster both ways:
  // by the median of its ratios within rounds, and by its median over all runs. A machine whose
  // speed drifts makes either alone pick a slower schedule now and then.
  double min_speedup = kClearlyFaster;
  // Before each timed block, untimed runs until this has passed: the previous candidate's OpenMP
  // threads spin for milliseconds after its last parallel region (round_timing.h).
  std::chrono::milliseconds settle{20};
  // Candidates of several workers and streams: priorities searched on a replay of their node
  // times (Note [Searched priorities] in schedule_search.h) become a candidate of their own when
  // the replay runs at least `min_replay_gain` faster with them. 0 iterations: no search.
  int search_iterations = 4000;
  int search_runs = 8;            // untimed runs whose node times (each node's median) are replayed
  double search_budget_ms = 250;  // per candidate searched; 0: no limit but the iterations
  double min_replay_gain = 1.01;
};

struct CpuTuning {
  std::unique_ptr<CpuParallelExecutor> executor;  // the kept candidate's (`chosen`), warmed up
  std::vector<CpuTuningCandidate> candidates;
  std::size_t chosen = 0;
  int rounds = 0;  // timed (0: a single candidate, untimed)
  // The first rounds left a candidate clearly faster by one measure only (measures_disagree): the
  // candidates were timed again, within the budget again, and chosen on all the rounds.
  bool timed_again = false;
  int runs_per_round = 0;
  double plan_us = 0;    // planning the chosen candidate
  double tuning_ms = 0;  // all of it: planning, warming up and timing every candidate
};

// Plans `graph` with each candidate's cap (replacing plan_options.max_streams) and runs it on
// `inputs` with the candidate's intra-op threads; executor_options.intra_op_threads, when set, is
// the one-stream candidate's (unset: the caller's, at most usable_cores()), and the rest of
// `executor_options` applies to every candidate, `priorities` included, except where a candidate
// with searched priorities follows one (CpuTuningOptions::search_iterations). Candidates that plan the same streams as
// one before them are dropped, and a single-stream policy has the first alone. Candidates are timed in interleaved
// rounds and compared with the first within each round, so that a slow moment of the machine cannot pick for them;
// where the two measures disagree (measures_disagree) they are timed once more and chosen on all the rounds.
// Inputs that a model writes in place are put back after every run (untimed): tuning leaves them as they were given.
CpuTuning tune_cpu_executor(const Graph& graph, PlanOptions plan_options, const std::vector<NodeCost>& costs,
                            const std::vector<c10::IValue>& inputs, CpuExecutorOptions executor_options,
                            const CpuTuningOptions& tuning = {});

}  // namespace opara
