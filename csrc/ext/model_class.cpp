// torch.classes.opara.Model: a CompiledModel for Python and TorchScript callers; and
// torch.classes.opara.Program, a program imported once that compiles a Model per shape.
#include <fmt/format.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <tuple>

#include "ext/archive_bytes.h"
#include "ext/stats_dict.h"
#include "ext/tensor_snapshot.h"
#include "ext/text_options.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/package.h"
#include "opara/plan.h"
#include "support/text_file.h"

namespace opara::ext {
namespace {

class Model : public torch::CustomClassHolder {
 public:
  Model(const std::string& path, const std::vector<at::Tensor>& example_inputs,
        const std::optional<c10::Dict<std::string, std::string>>& options)
      : model_(compile(path, example_inputs, options_from_dict(options))) {}
  explicit Model(CompiledModel model) : model_(std::move(model)) {}

  // A model archive of either format held in memory, as a 1-d uint8 CPU tensor of its bytes (from
  // Python: torch.frombuffer over what torch.export.save or torch.jit.save wrote to a buffer);
  // `name` stands for the file in errors. `regions` (empty: none) describes the program's regions
  // compiled by Inductor, which `region_constants` read (with_compiled_regions).
  static c10::intrusive_ptr<Model> from_archive(const at::Tensor& archive, const std::string& name,
                                                const std::vector<at::Tensor>& example_inputs,
                                                const std::optional<c10::Dict<std::string, std::string>>& options,
                                                const std::string& regions,
                                                const std::vector<at::Tensor>& region_constants) {
    return c10::make_intrusive<Model>(
        compile(archive_graph(archive, name, regions, region_constants), example_inputs, options_from_dict(options)));
  }

  // A package opara.package wrote (opara::load_package); `options` replace the package's.
  // `inputs`: compiled for these (a compile cache entry holds none), else the package's examples.
  static c10::intrusive_ptr<Model> from_package(const std::string& path,
                                                const std::optional<c10::Dict<std::string, std::string>>& options,
                                                const std::optional<std::vector<at::Tensor>>& inputs) {
    std::map<std::string, std::string> text;
    if (options) {
      for (const auto& entry : *options) text.emplace(entry.key(), entry.value());
    }
    return c10::make_intrusive<Model>(inputs ? load_package(path, *inputs, text) : load_package(path, text));
  }

  std::vector<at::Tensor> run(const std::vector<at::Tensor>& inputs) const { return model_.run(inputs); }

  std::string plan() const { return to_json(model_.graph(), model_.plan()); }

  void save_plan(const std::string& path) const {
    write_text_file(path, to_json(model_.graph(), model_.plan()) + "\n", "the plan");
  }

  std::string device() const { return model_.stats().device; }

  std::vector<int64_t> static_inputs() const { return {model_.static_inputs().begin(), model_.static_inputs().end()}; }

  bool adopt_state(const std::vector<at::Tensor>& inputs) const { return model_.adopt_state(inputs); }

  // What run_watched checks before each run: the weights at `weights` (read where they are: their
  // memory and strides) and at `folded` (held folded into the regions: their version counters too),
  // and the state the model writes in place (its other static inputs).
  void watch(const std::vector<at::Tensor>& inputs, const std::vector<int64_t>& weights,
             const std::vector<int64_t>& folded) {
    weights_ = TensorSnapshot(inputs, weights, folded);  // refuses a position outside `inputs`
    std::vector<bool> is_weight(inputs.size(), false);
    for (int64_t position : weights) is_weight[static_cast<std::size_t>(position)] = true;
    std::vector<int64_t> state;
    for (int index : model_.static_inputs()) {
      const auto k = static_cast<std::size_t>(index);
      if (k >= is_weight.size() || !is_weight[k]) state.push_back(index);  // one outside: refused just below
    }
    state_ = TensorSnapshot(inputs, state, {});
    held_weights_.clear();
    caller_positions_.clear();
    for (std::size_t k = 0; k < inputs.size(); ++k) {
      if (is_weight[k]) {
        held_weights_.emplace_back(static_cast<int64_t>(k), inputs[k]);
      } else {
        caller_positions_.push_back(static_cast<int64_t>(k));
      }
    }
  }

  // run_watched for a call whose weights are the very tensors watch() was given (the caller saw the
  // same objects): only the others cross from Python, in their order, and the weights are checked
  // here as run_watched checks them (another memory, a folded one written). Converting hundreds of
  // weights at each call cost more than the check (GoogLeNet's 300: 25 us of torchbind a call).
  std::tuple<int64_t, std::vector<at::Tensor>> run_with_watched_weights(const std::vector<at::Tensor>& others) const {
    if (others.size() != caller_positions_.size()) {
      throw Error(fmt::format("run_with_watched_weights: {} tensors given besides the weights, {} expected",
                              others.size(), caller_positions_.size()));
    }
    std::vector<at::Tensor> inputs(held_weights_.size() + caller_positions_.size());
    for (const auto& [position, weight] : held_weights_) inputs[position] = weight;
    for (std::size_t k = 0; k < others.size(); ++k) inputs[caller_positions_[k]] = others[k];
    return run_watched(inputs);
  }

  // (kSame, outputs) where the watched tensors are as they were: the same weights, and the same
  // state or new tensors whose predecessors the caller dropped (adopt_state); else (kWritten: a
  // folded weight was written in place; kMoved: a weight or the state is another tensor now, no
  // outputs) without running. One call a step: each call from Python converts every tensor.
  std::tuple<int64_t, std::vector<at::Tensor>> run_watched(const std::vector<at::Tensor>& inputs) const {
    TensorSnapshot::Found found = weights_.check(inputs);
    if (found == TensorSnapshot::Found::kSame && state_.check(inputs) != TensorSnapshot::Found::kSame &&
        !model_.adopt_state(inputs)) {
      found = TensorSnapshot::Found::kMoved;
    }
    if (found != TensorSnapshot::Found::kSame) return {static_cast<int64_t>(found), {}};
    return {static_cast<int64_t>(found), model_.run(inputs)};
  }

  // The live state buffers by name (CompiledModel::state()).
  c10::Dict<std::string, at::Tensor> state() const {
    c10::Dict<std::string, at::Tensor> named;
    for (const auto& [name, tensor] : model_.state()) named.insert(name, tensor);
    return named;
  }

  // Every number CompiledStats has; the device is device().
  c10::Dict<std::string, double> stats() const { return stats_dict(model_.stats()); }

  // All of CompiledStats as JSON (to_json): the lists too, the CPU's tuning and CUDA's candidates.
  std::string stats_json() const { return to_json(model_.stats()); }

  // chosen_schedule_options: what a warm start passes to get this schedule without timing again.
  c10::Dict<std::string, std::string> chosen_options() const {
    c10::Dict<std::string, std::string> options;
    for (const auto& [key, value] : chosen_schedule_options(model_.stats())) options.insert(key, value);
    return options;
  }

  // schedule_choice_record: what the package this was loaded from keeps so that a later load on
  // this machine does not time again ("" when nothing was timed).
  std::string choice_record() const { return schedule_choice_record(model_); }

 private:
  CompiledModel model_;
  TensorSnapshot weights_;
  TensorSnapshot state_;
  // What watch() was given: the weights by position, and the others' positions.
  std::vector<std::pair<int64_t, at::Tensor>> held_weights_;
  std::vector<int64_t> caller_positions_;
};

// A model archive imported once (a dynamic-shape program: a torch.compile graph of symbolic sizes),
// compiled for each shape's inputs without reading the archive again (bert_base's weights made
// each read of it 270 ms).
class Program : public torch::CustomClassHolder {
 public:
  Program(const at::Tensor& archive, const std::string& name)
      : graph_(load_archive(archive_bytes(archive, name), name)) {}

  // As Model.from_archive: `regions` (empty: none) describes the regions compiled by Inductor.
  c10::intrusive_ptr<Model> compile(const std::vector<at::Tensor>& example_inputs,
                                    const std::optional<c10::Dict<std::string, std::string>>& options,
                                    const std::string& regions, const std::vector<at::Tensor>& region_constants) const {
    const Options parsed = options_from_dict(options);
    return c10::make_intrusive<Model>(
        regions.empty()
            ? opara::compile(graph_, example_inputs, parsed)
            : opara::compile(with_compiled_regions(graph_, regions, region_constants), example_inputs, parsed));
  }

 private:
  Graph graph_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.class_<Model>("Model")
      .def(torch::init<std::string, std::vector<at::Tensor>, std::optional<c10::Dict<std::string, std::string>>>(),
           "Loads a .pt or .pt2 model, plans it and compiles it for the example inputs' signature",
           {
               torch::arg("path"),
               torch::arg("example_inputs"),
               torch::arg("options") = torch::arg::none(),
           })
      .def_static("from_archive", &Model::from_archive,
                  "Loads a model archive held in memory (a uint8 tensor of the bytes torch.export.save or "
                  "torch.jit.save wrote), with its regions compiled by Inductor as nodes where `regions` describes "
                  "them, plans it and compiles it for the example inputs' signature")
      .def_static("from_package", &Model::from_package,
                  "Loads a package opara.package wrote: its program, plan and AOTInductor regions, compiled for "
                  "the example inputs it holds, or for `inputs` where given; `options` replace the package's")
      .def("run", &Model::run, "Runs the compiled model; inputs must match the examples' shapes, dtypes and device")
      .def("plan", &Model::plan, "The schedule as JSON (streams, launch order, events; each node's kind and source)")
      .def("save_plan", &Model::save_plan, "Writes plan() to a file")
      .def("stats", &Model::stats, "Compile-time and run-time counters")
      .def("chosen_options", &Model::chosen_options,
           "The options that compile again the schedule tuning (CPU) or measuring (CUDA) chose, without timing")
      .def("choice_record", &Model::choice_record,
           "The schedule compile timed and the machine it holds on, as a package keeps it (opara/choice.json); "
           "empty when nothing was timed")
      .def("stats_json", &Model::stats_json,
           "Every stat as JSON, the lists included: the CPU's tuning candidates, CUDA's measured candidates")
      .def("device", &Model::device, "The device the model runs on")
      .def("static_inputs", &Model::static_inputs,
           "The inputs read and written where they are: each run must pass these very tensors")
      .def("adopt_state", &Model::adopt_state,
           "Takes new tensors for the written static inputs (a new KV cache) once the old ones are dropped; "
           "false when one is still held (compile again)")
      .def("watch", &Model::watch,
           "Records what run_watched checks: the weights at `weights` (their memory), those at `folded` (their "
           "version counters too) and the state the model writes (its other static inputs)")
      .def("run_watched", &Model::run_watched,
           "(0, outputs) where the watched tensors are as recorded (a new state adopted); else (2: a folded weight "
           "was written in place, 1: a weight or the state is another tensor) without running")
      .def("run_with_watched_weights", &Model::run_with_watched_weights,
           "run_watched for a call whose weights are the tensors watch() was given: the other tensors alone, in "
           "order")
      .def("state", &Model::state,
           "The buffers the model keeps between runs, by name: the live tensors (copy_ into them to set them)");
  // After Model, whose type Program.compile returns.
  m.class_<Program>("Program")
      .def(torch::init<at::Tensor, std::string>(),
           "Imports a model archive held in memory (a uint8 tensor of the bytes torch.export.save wrote) once",
           {torch::arg("archive"), torch::arg("name")})
      .def("compile", &Program::compile,
           "Plans the program and compiles it for the example inputs' signature, with its regions compiled by "
           "Inductor as nodes where `regions` describes them (as Model.from_archive)");
}

}  // namespace opara::ext
