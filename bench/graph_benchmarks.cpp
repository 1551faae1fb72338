// Google Benchmark for the graph analyses the planner leans on, on the exported models:
//   build/bin/opara-graph-bench [--benchmark_filter=width]
// Models come from $OPARA_MODELS (default torchscript_models/); missing ones are skipped.
#include <benchmark/benchmark.h>

#include <cstdlib>
#include <filesystem>
#include <map>

#include "opara/graph_analysis.h"
#include "opara/load.h"

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

void register_all() {
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
