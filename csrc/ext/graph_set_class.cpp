// torch.classes.opara.GraphSet: a GraphSet for Python and TorchScript callers.
#include <fmt/format.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <functional>
#include <map>

#include "ext/archive_bytes.h"
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
      : set_(compile_set(
            paths.size(), [&](std::size_t k) { return load(paths[k]); }, example_inputs, batch_sizes, options,
            batched_inputs, share_pool)) {}
  explicit GraphSetHolder(GraphSet set) : set_(std::move(set)) {}

  // The same from model archives held in memory (what torch.export.save or torch.jit.save wrote),
  // one for every batch size or one per batch size; `name` stands for the file in errors.
  static c10::intrusive_ptr<GraphSetHolder> from_archives(
      const std::vector<at::Tensor>& archives, const std::string& name, const std::vector<at::Tensor>& example_inputs,
      const std::vector<std::int64_t>& batch_sizes, const std::optional<c10::Dict<std::string, std::string>>& options,
      const std::optional<std::vector<std::int64_t>>& batched_inputs, bool share_pool,
      const std::vector<std::string>& regions, const std::vector<std::vector<at::Tensor>>& region_constants) {
    if (regions.size() != archives.size() || region_constants.size() != archives.size()) {
      throw Error(fmt::format("{}: {} archives, but {} region descriptions and {} lists of region constants", name,
                              archives.size(), regions.size(), region_constants.size()));
    }
    const auto load_archive_for = [&](std::size_t k) {
      const std::string named = archives.size() == 1 ? name : fmt::format("{} (batch {})", name, batch_sizes.at(k));
      return archive_graph(archives[k], named, regions[k], region_constants[k]);
    };
    return c10::make_intrusive<GraphSetHolder>(compile_set(archives.size(), load_archive_for, example_inputs,
                                                           batch_sizes, options, batched_inputs, share_pool));
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const { return set_.run(inputs); }

  std::int64_t check(const std::vector<at::Tensor>& inputs) const { return set_.check(inputs); }

  std::vector<std::int64_t> batch_sizes() const { return set_.batch_sizes(); }

  // GraphSetStats as JSON text, each bucket's CompiledStats under "buckets".
  std::string stats() const { return to_json(set_.stats()); }

 private:
  // `sources` models (files, archives), loaded by `load_source`: one for every batch size, or one
  // per batch size in `batch_sizes`' order.
  static GraphSet compile_set(std::size_t sources, const std::function<Graph(std::size_t)>& load_source,
                              const std::vector<at::Tensor>& example_inputs,
                              const std::vector<std::int64_t>& batch_sizes,
                              const std::optional<c10::Dict<std::string, std::string>>& options,
                              const std::optional<std::vector<std::int64_t>>& batched_inputs, bool share_pool) {
    if (sources == 0 || (sources != 1 && sources != batch_sizes.size())) {
      throw Error(fmt::format("a graph set takes one model file, or one per batch size ({}); {} were given",
                              batch_sizes.size(), sources));
    }
    std::map<std::int64_t, std::size_t> source_of;
    for (std::size_t k = 0; k < batch_sizes.size(); ++k) source_of[batch_sizes[k]] = sources == 1 ? 0 : k;
    GraphSetOptions set_options;
    set_options.batch_sizes = batch_sizes;
    set_options.share_pool = share_pool;
    if (batched_inputs) set_options.batched_inputs = std::vector<int>(batched_inputs->begin(), batched_inputs->end());
    std::map<std::size_t, Graph> loaded;  // a model read once, whatever sizes it serves
    const auto graph_for = [&](std::int64_t size) {
      const auto found = source_of.find(size);
      const std::size_t source = found != source_of.end() ? found->second : 0;
      auto graph = loaded.find(source);
      if (graph == loaded.end()) graph = loaded.emplace(source, load_source(source)).first;
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
      .def_static("from_archives", &GraphSetHolder::from_archives,
                  "Compiles one graph per batch size from model archives held in memory (uint8 tensors of the "
                  "bytes torch.export.save or torch.jit.save wrote): one for every batch size, or one per batch size")
      .def("run", &GraphSetHolder::run, "Runs a call of any number of rows on the smallest bucket that fits")
      .def("check", &GraphSetHolder::check, "Checks a call's inputs as run() does, without running; returns its rows")
      .def("batch_sizes", &GraphSetHolder::batch_sizes, "The buckets' batch sizes, ascending")
      .def("stats", &GraphSetHolder::stats, "Calls, rows, padding, pieces, pools and each bucket's stats, as JSON");
}

}  // namespace opara::ext
