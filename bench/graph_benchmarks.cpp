// Google Benchmark for the planner and the graph analyses it leans on, on the exported models and
// on synthetic DNN-like DAGs of 1k, 10k and 100k nodes:
//   build/bin/opara-graph-bench [--benchmark_filter=plan/]
// Models come from $OPARA_MODELS (default torchscript_models/); missing ones are skipped.
// Planning benchmarks: "streams/opara" is Alg. 1 alone (the paper's Table I figure), "plan/opara"
// the whole plan (launch order by Alg. 2, allocation, events); "streams/nimble" beside them
// (Nimble's two steps), and "streams/nimble_chains" its first step alone; "streams/trtllm" and
// "streams/torchsched" the peers' automatic schedulers at their default stream counts.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <functional>
#include <map>

#include "graph/graph_analysis.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "schedule/kernel_dag.h"
#include "schedule/stages.h"
#include "synthetic_graphs.h"

namespace {

const opara::Graph* model_graph(const std::string& name) {
  static std::map<std::string, opara::Graph> cache;
  if (auto found = cache.find(name); found != cache.end()) return &found->second;
  const char* folder = std::getenv("OPARA_MODELS");
  const auto path = std::filesystem::path(folder ? folder : "torchscript_models") / (name + "_b1.pt2");
  if (!std::filesystem::exists(path)) return nullptr;
  return &cache.emplace(name, opara::load(path.string())).first->second;
}

template <typename Analysis>
void run_on_model(benchmark::State& state, const std::string& name, Analysis analysis) {
  const opara::Graph* graph = model_graph(name);
  if (!graph) {
    state.SkipWithError(("model " + name + " is not exported: run scripts/export_models.py").c_str());
    return;
  }
  for (auto _ : state) benchmark::DoNotOptimize(analysis(*graph));
  state.counters["nodes"] = static_cast<double>(graph->size());
}

const opara::Graph& synthetic_graph(int nodes) {
  static std::map<int, opara::Graph> cache;
  if (auto found = cache.find(nodes); found != cache.end()) return found->second;
  return cache.emplace(nodes, opara::bench::dnn_like_graph(nodes, 1)).first->second;
}

// The planner's benchmarks on one graph: Alg. 1 alone, Nimble alone, the whole plan.
void register_planning(const std::string& name, std::function<const opara::Graph*()> graph_of, bool with_nimble) {
  auto run = [graph_of](benchmark::State& state, auto work) {
    const opara::Graph* graph = graph_of();
    if (!graph) {
      state.SkipWithError("model not exported: run scripts/export_models.py");
      return;
    }
    const auto order = opara::topological_order(*graph);
    const auto costs = opara::estimate_costs(*graph, {});
    int streams = 0;
    for (auto _ : state) streams = work(*graph, order, costs);
    state.counters["nodes"] = static_cast<double>(graph->size());
    state.counters["streams"] = streams;
  };
  benchmark::RegisterBenchmark(("streams/opara/" + name).c_str(), [run](benchmark::State& state) {
    run(state, [](const opara::Graph& g, const auto& order, const auto&) {
      return opara::allocate_streams(g, opara::StreamPolicy::kOpara, order).stream_count;
    });
  })->Unit(benchmark::kMicrosecond);
  benchmark::RegisterBenchmark(("streams/trtllm/" + name).c_str(), [run](benchmark::State& state) {
    run(state, [](const opara::Graph& g, const auto& order, const auto&) {
      return opara::allocate_streams(g, opara::StreamPolicy::kTrtllm, order).stream_count;
    });
  })->Unit(benchmark::kMicrosecond);
  if (with_nimble) {
    // torchsched's walk revisits a node each time it reaches it deeper: 0.1 s at 10k nodes, 28 s
    // at 100k, so it stops at 10k with Nimble.
    benchmark::RegisterBenchmark(("streams/torchsched/" + name).c_str(), [run](benchmark::State& state) {
      run(state, [](const opara::Graph& g, const auto& order, const auto&) {
        return opara::allocate_streams(g, opara::StreamPolicy::kTorchsched, order).stream_count;
      });
    })->Unit(benchmark::kMicrosecond);
    // Nimble's first step alone (chains: a path cover of the transitive reduction), then both
    // steps (the chains covered again by reachability), which is Nimble's assignment.
    benchmark::RegisterBenchmark(("streams/nimble_chains/" + name).c_str(), [run](benchmark::State& state) {
      run(state, [](const opara::Graph& g, const auto& order, const auto&) {
        return opara::nimble_chains(opara::kernel_dag(g), order).stream_count;
      });
    })->Unit(benchmark::kMicrosecond);
    benchmark::RegisterBenchmark(("streams/nimble/" + name).c_str(), [run](benchmark::State& state) {
      run(state, [](const opara::Graph& g, const auto& order, const auto&) {
        return opara::allocate_streams(g, opara::StreamPolicy::kNimble, order).stream_count;
      });
    })->Unit(benchmark::kMicrosecond);
  }
  benchmark::RegisterBenchmark(("plan/opara/" + name).c_str(), [run](benchmark::State& state) {
    run(state, [](const opara::Graph& g, const auto&, const auto& costs) {
      return opara::make_plan(g, opara::PlanOptions{}, costs).stream_count;
    });
  })->Unit(benchmark::kMicrosecond);
  if (with_nimble) {  // Nimble's streams with the same events and launch order, for the whole-plan comparison
    benchmark::RegisterBenchmark(("plan/nimble/" + name).c_str(), [run](benchmark::State& state) {
      run(state, [](const opara::Graph& g, const auto&, const auto& costs) {
        return opara::make_plan(g, opara::PlanOptions{opara::StreamPolicy::kNimble}, costs).stream_count;
      });
    })->Unit(benchmark::kMicrosecond);
  }
}

void register_all() {
  for (const char* model : {"googlenet", "inception_v3", "bert_base", "t5_small"}) {
    const std::string name = model;
    register_planning(
        name, [name] { return model_graph(name); }, true);
  }
  for (int nodes : {1000, 10000, 100000}) {
    // Nimble's transitive reduction and closure keep n^2 bits each: 1.25 GB at 100k nodes, so it
    // stops at 10k.
    register_planning(
        "dnn_" + std::to_string(nodes / 1000) + "k", [nodes] { return &synthetic_graph(nodes); }, nodes <= 10000);
  }
  for (const char* model : {"googlenet", "inception_v3", "bert_base", "t5_small"}) {
    const std::string name = model;
    benchmark::RegisterBenchmark(("topological_order/" + name).c_str(), [name](benchmark::State& state) {
      run_on_model(state, name, [](const opara::Graph& g) { return opara::topological_order(g); });
    });
    benchmark::RegisterBenchmark(("width/" + name).c_str(), [name](benchmark::State& state) {
      run_on_model(state, name, [](const opara::Graph& g) { return opara::width(g); });
    });
    benchmark::RegisterBenchmark(("critical_path/" + name).c_str(), [name](benchmark::State& state) {
      run_on_model(state, name, [](const opara::Graph& g) { return opara::critical_path(g).length; });
    });
    benchmark::RegisterBenchmark(("transitive_reduction/" + name).c_str(), [name](benchmark::State& state) {
      run_on_model(state, name, [](const opara::Graph& g) { return opara::transitive_reduction(g).size(); });
    });
  }
}

}  // namespace

int main(int argc, char** argv) {
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 2;
  register_all();
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
