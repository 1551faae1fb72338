// torch.export import. The archive holds models/<name>.json (an ExportedProgram) and
// data/weights|constants/<name>_*_config.json naming raw storage records. Here: the archive, the
// weights, the program's state and its signature's inputs and outputs; each FX node becomes a
// graph node in exported_node.cpp.
#include "import/exported_program_import.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/utils/generated_serialization_types.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <unordered_map>

#include "exec/first_line.h"
#include "exec/state_buffers.h"
#include "import/archive.h"
#include "import/exported_arguments.h"
#include "import/exported_input_sizes.h"
#include "import/exported_node.h"
#include "import/exported_state.h"
#include "import/import_errors.h"
#include "import/inline_wrappers.h"
#include "import/schema_alias_edges.h"

namespace opara {
namespace {

class ExportedProgramImporter {
 public:
  // From a file, or from an archive in memory (`bytes`; `path` then names it in errors).
  explicit ExportedProgramImporter(std::string path, std::shared_ptr<const std::string> bytes = nullptr)
      : path_(std::move(path)), bytes_(std::move(bytes)) {}

  Graph run() {
    reader_ = bytes_ ? open_archive_bytes(bytes_, path_) : open_archive(path_);
    find_model_name();
    const ep::ExportedProgram program = read_program();
    const ep::GraphModule& module = program.get_graph_module();
    graph_.source_path = path_;
    // A program that parses may still hold a field of the wrong kind (an argument whose tag does not
    // match its value, a missing name): LibTorch's schema types then throw from deep inside
    // (std::get, nlohmann), and the message must still say which file and where.
    std::string reading = "the weights";
    try {
      read_payload(fmt::format("data/weights/{}_weights_config.json", model_name_), "data/weights/");
      read_payload(fmt::format("data/constants/{}_constants_config.json", model_name_), "data/constants/");
      reading = "the graph's wrapped regions";
      InlinedNodes inlined = inline_wrappers(module.get_graph(), path_);
      reading = "the program's state";
      state_ = program_state(module.get_signature(), inlined.nodes, module.get_graph().get_tensor_values(), path_);
      aliases_ = std::move(inlined.aliases);
      reading = "the graph signature's inputs";
      add_inputs(module.get_signature());
      reading = "the sizes of the graph's inputs";
      record_symbolic_sizes(module, program.get_range_constraints(), program.get_guards_code());
      names_.recorded = &module.get_graph().get_tensor_values();
      for (const ep::Node& node : inlined.nodes) {
        reading = fmt::format("node {} ({})", graph_.size(), node.get_target());
        add_node(node);
      }
      names_.recorded = nullptr;  // the program's, which goes when run() returns
      reading = "the graph signature's outputs";
      add_outputs(module.get_signature());
    } catch (const Error&) {
      throw;
    } catch (const InternalError&) {
      throw;  // a bug in opara, not a damaged program
    } catch (const std::exception& error) {
      fail_import(
          path_,
          "the program is damaged at {} ({}). Write the file again with torch.export.save in torch " TORCH_VERSION,
          reading, first_line(error));
    }
    add_schema_alias_edges(graph_, aliasing_);
    return std::move(graph_);
  }

 private:
  // The program is models/<name>.json; its weights configs are named after <name>.
  void find_model_name() {
    for (const std::string& record : reader_->getAllRecords()) {
      const std::string prefix = "models/";
      if (record.rfind(prefix, 0) == 0 && record.size() > 5 && record.substr(record.size() - 5) == ".json") {
        model_name_ = record.substr(prefix.size(), record.size() - prefix.size() - 5);
        return;
      }
    }
    fail_import(path_,
                "a zip archive without models/*.json, so not a torch.export program. Write it with "
                "torch.export.save(torch.export.export(model, inputs), path)");
  }

  std::string read_text(const std::string& record) {
    auto [data, size] = reader_->getRecord(record);
    return std::string(static_cast<const char*>(data.get()), size);
  }

  ep::ExportedProgram read_program() {
    const std::string record = fmt::format("models/{}.json", model_name_);
    try {
      const auto json = nlohmann::json::parse(read_text(record));
      const auto major = json.at("schema_version").at("major").get<int>();
      if (major != kSchemaMajor) {
        fail_import(path_,
                    "written with export schema version {}, this LibTorch reads version {}. Export the "
                    "model again with torch " TORCH_VERSION,
                    major, kSchemaMajor);
      }
      return json.get<ep::ExportedProgram>();
    } catch (const Error&) {
      throw;
    } catch (const std::exception& error) {
      fail_import(path_, "{} is not a valid exported program ({}). Write the file again with torch.export.save", record,
                  first_line(error));
    }
  }

  // Reads every tensor a payload config names, as raw storage bytes viewed with its metadata.
  void read_payload(const std::string& config_record, const std::string& folder) {
    if (!reader_->hasRecord(config_record)) return;
    ep::PayloadConfig config;
    try {
      config = nlohmann::json::parse(read_text(config_record)).get<ep::PayloadConfig>();
    } catch (const std::exception& error) {
      fail_import(path_, "{} is malformed ({})", config_record, first_line(error));
    }
    for (const auto& [name, meta] : config.get_config()) weights_[name] = read_weight(name, meta, folder);
  }

  // One raw storage record viewed with its metadata, without a copy.
  at::Tensor read_weight(const std::string& name, const ep::PayloadMeta& meta, const std::string& folder) {
    const std::string record = folder + meta.get_path_name();
    if (!reader_->hasRecord(record)) fail_import(path_, "the weight {} is missing ({})", name, record);
    if (meta.get_use_pickle() || !meta.get_tensor_meta()) {
      fail_import(path_,
                  "{} is stored pickled, which opara does not read. Export the model again with "
                  "torch.export.save in torch " TORCH_VERSION,
                  name);
    }
    const ep::TensorMeta& tensor_meta = *meta.get_tensor_meta();
    const auto dtype = to_scalar_type(tensor_meta.get_dtype());
    if (!dtype) {
      fail_import(path_,
                  "the weight {} has a dtype of code {}, which this LibTorch does not know. Export the model "
                  "again with torch " TORCH_VERSION,
                  name, static_cast<int>(tensor_meta.get_dtype()));
    }
    const std::vector<int64_t> sizes = static_ints(name, tensor_meta.get_sizes());
    const std::vector<int64_t> strides = static_ints(name, tensor_meta.get_strides());
    const auto offset = tensor_meta.get_storage_offset();
    auto [data, size] = reader_->getRecord(record);
    c10::Storage storage(c10::Storage::use_byte_size_t(), size, std::move(data), nullptr, false);
    try {
      at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(*dtype));
      tensor.set_(storage, offset.tag() == ep::SymInt::Tag::AS_INT ? offset.get_as_int() : 0, sizes, strides);
      return tensor;
    } catch (const std::exception& error) {
      fail_import(path_, "the weight {} does not fit its metadata ({}); the archive is damaged", name,
                  first_line(error));
    }
  }

  // A weight's sizes or strides; a symbolic one comes from a dynamic-shape export.
  std::vector<int64_t> static_ints(const std::string& weight, const std::vector<ep::SymInt>& values) const {
    std::vector<int64_t> ints;
    for (const ep::SymInt& value : values) {
      if (value.tag() != ep::SymInt::Tag::AS_INT) {
        fail_import(path_, "the weight {} has the symbolic size {} in its metadata: {}", weight,
                    value.get_as_expr().get_expr_str(), kDynamicShapesFix);
      }
      ints.push_back(value.get_as_int());
    }
    return ints;
  }

  at::Tensor weight(const std::string& name) {
    auto found = weights_.find(name);
    if (found == weights_.end()) fail_import(path_, "the archive lacks the tensor {} that the program uses", name);
    return found->second;
  }

  void add_inputs(const ep::GraphSignature& signature) {
    using Tag = ep::InputSpec::Tag;
    std::vector<const ep::InputToBufferSpec*> state;  // after the caller's inputs
    for (const ep::InputSpec& spec : signature.get_input_specs()) {
      switch (spec.tag()) {
        case Tag::PARAMETER:
          names_.constants[spec.get_parameter().get_arg().get_name()] =
              weight(spec.get_parameter().get_parameter_name());
          break;
        case Tag::BUFFER:
          if (state_.state_buffers.count(spec.get_buffer().get_arg().get_name())) {
            state.push_back(&spec.get_buffer());
          } else {
            names_.constants[spec.get_buffer().get_arg().get_name()] = weight(spec.get_buffer().get_buffer_name());
          }
          break;
        case Tag::TENSOR_CONSTANT:
          names_.constants[spec.get_tensor_constant().get_arg().get_name()] =
              weight(spec.get_tensor_constant().get_tensor_constant_name());
          break;
        case Tag::USER_INPUT: {
          const ep::Argument& arg = spec.get_user_input().get_arg();
          if (arg.tag() != ep::Argument::Tag::AS_TENSOR) {
            fail_import(path_, "a non-tensor model input; opara takes tensors only. Export with every input a tensor");
          }
          const std::string& name = arg.get_as_tensor().get_name();
          names_.values[name] = graph_.add_input(name, "Tensor");
          break;
        }
        default:
          fail_import(path_,
                      "an input kind opara does not run (custom object or token). Export the model "
                      "without custom classes or effectful ops");
      }
    }
    for (const ep::InputToBufferSpec* buffer : state) {
      names_.values[buffer->get_arg().get_name()] = graph_.add_state(
          buffer->get_buffer_name(), std::make_shared<InitialValueOp>(weight(buffer->get_buffer_name())));
    }
  }

  // A dynamic-shape program's input sizes, which the inputs it is compiled for must fit,
  // and the conditions on them it was exported under.
  void record_symbolic_sizes(const ep::GraphModule& module,
                             const std::unordered_map<std::string, ep::RangeConstraint>& ranges,
                             const std::vector<std::string>& guards) {
    const auto& metas = module.get_graph().get_tensor_values();
    std::vector<std::vector<InputSize>> sizes;
    std::vector<std::string> names;
    bool symbolic = false;
    for (std::size_t i = 0; i < graph_.caller_input_count(); ++i) {
      names.push_back(graph_.value(graph_.inputs()[i]).name);
      auto meta = metas.find(names.back());
      if (meta == metas.end()) return;  // no record of its sizes: nothing to check against
      sizes.push_back(exported_input_sizes(meta->second, ranges, path_, names.back()));
      symbolic = symbolic || any_symbolic(sizes.back());
    }
    if (!symbolic) return;
    graph_.symbolic_input_sizes = std::move(sizes);
    graph_.input_guards = exported_input_guards(guards, names, path_);
  }

  // A functional program's writes (a mutation output) land in their input or buffer: by the node
  // that made the value, run as its in-place twin when nothing reads the old value after it,
  // else by a copy after the graph. Then the outputs the caller gets.
  void add_outputs(const ep::GraphSignature& signature) {
    using Tag = ep::OutputSpec::Tag;
    for (const ep::OutputSpec& spec : signature.get_output_specs()) {
      if (spec.tag() != Tag::BUFFER_MUTATION && spec.tag() != Tag::USER_INPUT_MUTATION) continue;
      const std::string& written = spec.tag() == Tag::BUFFER_MUTATION
                                       ? spec.get_buffer_mutation().get_arg().get_name()
                                       : spec.get_user_input_mutation().get_arg().get_name();
      auto placeholder = state_.written_back.find(written);
      if (placeholder == state_.written_back.end() || !names_.values.count(placeholder->second)) {
        fail_import(path_, "the program writes {} into a buffer or input it does not take; the file is damaged",
                    written);
      }
      if (!state_.in_place.count(written)) add_node(copy_node(placeholder->second, resolved(written)));
    }
    for (const ep::OutputSpec& spec : signature.get_output_specs()) {
      if (spec.tag() == Tag::BUFFER_MUTATION || spec.tag() == Tag::USER_INPUT_MUTATION) continue;
      if (spec.tag() != Tag::USER_OUTPUT) {
        fail_import(path_,
                    "the program has a training output (a loss, a gradient, a parameter update or a token); opara "
                    "runs inference graphs. Export the model in eval() mode under torch.no_grad()");
      }
      const ep::Argument& arg = spec.get_user_output().get_arg();
      if (arg.tag() != ep::Argument::Tag::AS_TENSOR) {
        fail_import(path_, "a non-tensor model output; opara returns tensors only");
      }
      const std::string name = resolved(arg.get_as_tensor().get_name());
      auto found = names_.values.find(name);
      if (found != names_.values.end()) {
        graph_.add_output(found->second);
      } else {
        fail_import(path_, "the output {} is a parameter or constant, not computed; opara cannot return it", name);
      }
    }
  }

  // `placeholder.copy_(value)`, as the program would have said it.
  static ep::Node copy_node(const std::string& placeholder, const std::string& value) {
    const auto tensor = [](const std::string& name) {
      ep::TensorArgument tensor;
      tensor.set_name(name);
      ep::Argument arg;
      arg.set_as_tensor(std::move(tensor));
      return arg;
    };
    const auto named = [](const std::string& name, ep::Argument arg) {
      ep::NamedArgument named;
      named.set_name(name);
      named.set_arg(std::move(arg));
      return named;
    };
    ep::Node node;
    node.set_target("torch.ops.aten.copy_.default");
    // Typed vectors: torch 2.15's generated setters are templates, which a braced list cannot name.
    node.set_inputs(std::vector<ep::NamedArgument>{named("self", tensor(placeholder)), named("src", tensor(value))});
    node.set_outputs(std::vector<ep::Argument>{tensor(fmt::format("{}.written_back", placeholder))});
    return node;
  }

  static std::string first_name(const ep::Argument& arg) {
    const std::vector<std::string> names = value_names(arg);
    return names.empty() ? std::string() : names.front();
  }

  // What a name a wrapped region returned unchanged stands for.
  std::string resolved(const std::string& name) const {
    auto found = aliases_.find(name);
    return found != aliases_.end() ? found->second : name;
  }

  void add_node(const ep::Node& node) {
    // A functional write into state whose node may do it in place (ProgramState::in_place).
    const bool in_place = node.get_outputs().size() == 1 && state_.in_place.count(first_name(node.get_outputs()[0]));
    const std::string target = in_place ? in_place_target(node.get_target()) : node.get_target();
    aliasing_.push_back(add_exported_node(node, target, path_, names_, graph_));
  }

  static constexpr int kSchemaMajor = 8;

  std::string path_;
  std::shared_ptr<const std::string> bytes_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
  std::string model_name_;
  std::unordered_map<std::string, at::Tensor> weights_;  // by state-dict name
  ExportedNames names_;                                  // placeholders and values computed so far
  std::vector<NodeAliasing> aliasing_;                   // by NodeId
  ProgramState state_;
  std::unordered_map<std::string, std::string> aliases_;  // InlinedNodes::aliases
  Graph graph_;
};

}  // namespace

Graph import_exported_program(const std::string& path) {
  return ExportedProgramImporter(path).run();
}

Graph import_exported_program_bytes(std::shared_ptr<const std::string> archive, const std::string& name) {
  return ExportedProgramImporter(name, std::move(archive)).run();
}

}  // namespace opara
