// torch.classes.opara.GraphSet: a GraphSet for Python and TorchScript callers.
#include <fmt/format.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <map>
#include <nlohmann/json.hpp>

#include "ext/stats_dict.h"
#include "ext/text_options.h"
#include "opara/error.h"
#include "opara/graph_set.h"
#include "opara/load.h"

namespace opara::ext {
namespace {

class GraphSetHolder : public torch::CustomClassHolder {
 public:
  // `paths`: one model file for every batch size, or one per batch size, in `batch_sizes`' order
  // (each made at its size: a model whose operators fix the batch).
  GraphSetHolder(const std::vector<std::string>& paths, const std::vector<at::Tensor>& example_inputs,
                 const std::vector<std::int64_t>& batch_sizes,
                 const std::optional<c10::Dict<std::string, std::string>>& options,
                 const std::optional<std::vector<std::int64_t>>& batched_inputs, bool share_pool)
      : set_(compile_set(paths, example_inputs, batch_sizes, options, batched_inputs, share_pool)) {}

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const { return set_.run(inputs); }

  std::int64_t check(const std::vector<at::Tensor>& inputs) const { return set_.check(inputs); }

  std::vector<std::int64_t> batch_sizes() const { return set_.batch_sizes(); }

  // GraphSetStats as JSON text, each bucket's CompiledStats under "buckets".
  std::string stats() const {
    const GraphSetStats stats = set_.stats();
    nlohmann::json json = {{"batch_sizes", stats.batch_sizes},
                           {"bucket_runs", stats.bucket_runs},
                           {"calls", stats.calls},
                           {"rows", stats.rows},
                           {"padded_rows", stats.padded_rows},
                           {"split_calls", stats.split_calls},
                           {"shared_pool", stats.shared_pool},
                           {"pool_bytes", stats.pool_bytes}};
    json["buckets"] = nlohmann::json::array();
    for (const CompiledStats& bucket : stats.buckets) {
      nlohmann::json entry = {{"device", bucket.device}};
      for (const auto& item : stats_dict(bucket)) entry[item.key()] = item.value();
      json["buckets"].push_back(entry);
    }
    return json.dump();
  }

 private:
  static GraphSet compile_set(const std::vector<std::string>& paths, const std::vector<at::Tensor>& example_inputs,
                              const std::vector<std::int64_t>& batch_sizes,
                              const std::optional<c10::Dict<std::string, std::string>>& options,
                              const std::optional<std::vector<std::int64_t>>& batched_inputs, bool share_pool) {
    if (paths.empty() || (paths.size() != 1 && paths.size() != batch_sizes.size())) {
      throw Error(fmt::format("a graph set takes one model file, or one per batch size ({}); {} were given",
                              batch_sizes.size(), paths.size()));
    }
    std::map<std::int64_t, std::string> path_of;
    for (std::size_t k = 0; k < batch_sizes.size(); ++k) path_of[batch_sizes[k]] = paths[paths.size() == 1 ? 0 : k];
    GraphSetOptions set_options;
    set_options.batch_sizes = batch_sizes;
    set_options.share_pool = share_pool;
    if (batched_inputs) set_options.batched_inputs = std::vector<int>(batched_inputs->begin(), batched_inputs->end());
    std::map<std::string, Graph> loaded;  // a file read once, whatever sizes it serves
    const auto graph_for = [&](std::int64_t size) {
      const auto found = path_of.find(size);
      const std::string& path = found != path_of.end() ? found->second : paths.front();
      auto graph = loaded.find(path);
      if (graph == loaded.end()) graph = loaded.emplace(path, load(path)).first;
      return graph->second;
    };
    return compile_graph_set(graph_for, example_inputs, set_options, options_from_dict(options));
  }

  GraphSet set_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.class_<GraphSetHolder>("GraphSet")
      .def(torch::init<std::vector<std::string>, std::vector<at::Tensor>, std::vector<std::int64_t>,
                       std::optional<c10::Dict<std::string, std::string>>, std::optional<std::vector<std::int64_t>>,
                       bool>(),
           "Compiles one graph per batch size: from one model file, or one file per batch size",
           {
               torch::arg("paths"),
               torch::arg("example_inputs"),
               torch::arg("batch_sizes"),
               torch::arg("options") = torch::arg::none(),
               torch::arg("batched_inputs") = torch::arg::none(),
               torch::arg("share_pool") = true,
           })
      .def("run", &GraphSetHolder::run, "Runs a call of any number of rows on the smallest bucket that fits")
      .def("check", &GraphSetHolder::check, "Checks a call's inputs as run() does, without running; returns its rows")
      .def("batch_sizes", &GraphSetHolder::batch_sizes, "The buckets' batch sizes, ascending")
      .def("stats", &GraphSetHolder::stats, "Calls, rows, padding, pieces, pools and each bucket's stats, as JSON");
}

}  // namespace opara::ext
