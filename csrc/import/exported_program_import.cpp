// torch.export import. The archive holds models/<name>.json (an ExportedProgram) and
// data/weights|constants/<name>_*_config.json naming raw storage records. Each FX node's target
// ("torch.ops.aten.conv2d.default") is found in the dispatcher; its named arguments are matched
// to the schema, missing ones take the schema's defaults.
#include "import/exported_program_import.h"

#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/utils/generated_serialization_types.h>

#include <ATen/ATen.h>
#include <nlohmann/json.hpp>

#include <unordered_map>

#include "exec/first_line.h"
#include "exec/state_buffers.h"
#include "import/archive.h"
#include "import/dispatcher_node_op.h"
#include "import/exported_names.h"
#include "import/exported_state.h"
#include "import/import_errors.h"
#include "import/inline_wrappers.h"
#include "import/node_properties.h"
#include "import/schema_alias_edges.h"

namespace opara {
namespace {

// The serialization schema numbers dtypes its own way (torch/_export/serde/schema.py).
c10::ScalarType to_scalar_type(ep::ScalarType type) {
  switch (type) {
    case ep::ScalarType::BYTE: return c10::kByte;
    case ep::ScalarType::CHAR: return c10::kChar;
    case ep::ScalarType::SHORT: return c10::kShort;
    case ep::ScalarType::INT: return c10::kInt;
    case ep::ScalarType::LONG: return c10::kLong;
    case ep::ScalarType::HALF: return c10::kHalf;
    case ep::ScalarType::FLOAT: return c10::kFloat;
    case ep::ScalarType::DOUBLE: return c10::kDouble;
    case ep::ScalarType::COMPLEXHALF: return c10::kComplexHalf;
    case ep::ScalarType::COMPLEXFLOAT: return c10::kComplexFloat;
    case ep::ScalarType::COMPLEXDOUBLE: return c10::kComplexDouble;
    case ep::ScalarType::BOOL: return c10::kBool;
    case ep::ScalarType::BFLOAT16: return c10::kBFloat16;
    case ep::ScalarType::UINT16: return c10::kUInt16;
    case ep::ScalarType::FLOAT8E4M3FN: return c10::kFloat8_e4m3fn;
    case ep::ScalarType::FLOAT8E5M2: return c10::kFloat8_e5m2;
    case ep::ScalarType::FLOAT8E4M3FNUZ: return c10::kFloat8_e4m3fnuz;
    case ep::ScalarType::FLOAT8E5M2FNUZ: return c10::kFloat8_e5m2fnuz;
    default: throw Error(fmt::format("unknown dtype code {}", static_cast<int>(type)));
  }
}

c10::MemoryFormat to_memory_format(ep::MemoryFormat format) {
  switch (format) {
    case ep::MemoryFormat::ChannelsLast: return c10::MemoryFormat::ChannelsLast;
    case ep::MemoryFormat::ChannelsLast3d: return c10::MemoryFormat::ChannelsLast3d;
    case ep::MemoryFormat::PreserveFormat: return c10::MemoryFormat::Preserve;
    default: return c10::MemoryFormat::Contiguous;
  }
}

c10::Layout to_layout(ep::Layout layout) {
  switch (layout) {
    case ep::Layout::SparseCoo: return c10::kSparse;
    case ep::Layout::SparseCsr: return c10::kSparseCsr;
    case ep::Layout::SparseCsc: return c10::kSparseCsc;
    case ep::Layout::SparseBsr: return c10::kSparseBsr;
    case ep::Layout::SparseBsc: return c10::kSparseBsc;
    case ep::Layout::_mkldnn: return c10::kMkldnn;
    default: return c10::kStrided;
  }
}

std::vector<int64_t> static_ints(const std::vector<ep::SymInt>& values) {
  std::vector<int64_t> ints;
  for (const ep::SymInt& value : values) {
    if (value.tag() != ep::SymInt::Tag::AS_INT) throw Error("a symbolic size");
    ints.push_back(value.get_as_int());
  }
  return ints;
}

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
      state_ = program_state(module.get_signature(), inlined.nodes);
      aliases_ = std::move(inlined.aliases);
      reading = "the graph signature's inputs";
      add_inputs(module.get_signature());
      for (const ep::Node& node : inlined.nodes) {
        reading = fmt::format("node {} ({})", graph_.size(), node.get_target());
        add_node(node);
      }
      reading = "the graph signature's outputs";
      add_outputs(module.get_signature());
    } catch (const Error&) {
      throw;
    } catch (const std::exception& error) {
      fail_import(path_, "the program is damaged at {} ({}). Write the file again with torch.export.save in torch 2.11",
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
                    "model again with torch 2.11",
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
    for (const auto& [name, meta] : config.get_config()) {
      const std::string record = folder + meta.get_path_name();
      if (!reader_->hasRecord(record)) fail_import(path_, "the weight {} is missing ({})", name, record);
      auto [data, size] = reader_->getRecord(record);
      if (meta.get_use_pickle() || !meta.get_tensor_meta()) {
        fail_import(path_,
                    "{} is stored pickled, which opara does not read. Export the model again with "
                    "torch.export.save in torch 2.11",
                    name);
      }
      const ep::TensorMeta& tensor_meta = *meta.get_tensor_meta();
      c10::Storage storage(c10::Storage::use_byte_size_t(), size, std::move(data), nullptr, false);
      try {
        at::Tensor tensor = at::empty({0}, at::TensorOptions().dtype(to_scalar_type(tensor_meta.get_dtype())));
        const auto offset = tensor_meta.get_storage_offset();
        tensor.set_(storage, offset.tag() == ep::SymInt::Tag::AS_INT ? offset.get_as_int() : 0,
                    static_ints(tensor_meta.get_sizes()), static_ints(tensor_meta.get_strides()));
        weights_[name] = tensor;
      } catch (const std::exception& error) {
        fail_import(path_, "the weight {} does not fit its metadata ({}); the archive is damaged", name,
                    first_line(error));
      }
    }
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
          constants_[spec.get_parameter().get_arg().get_name()] = weight(spec.get_parameter().get_parameter_name());
          break;
        case Tag::BUFFER:
          if (state_.state_buffers.count(spec.get_buffer().get_arg().get_name())) {
            state.push_back(&spec.get_buffer());
          } else {
            constants_[spec.get_buffer().get_arg().get_name()] = weight(spec.get_buffer().get_buffer_name());
          }
          break;
        case Tag::TENSOR_CONSTANT:
          constants_[spec.get_tensor_constant().get_arg().get_name()] =
              weight(spec.get_tensor_constant().get_tensor_constant_name());
          break;
        case Tag::USER_INPUT: {
          const ep::Argument& arg = spec.get_user_input().get_arg();
          if (arg.tag() != ep::Argument::Tag::AS_TENSOR) {
            fail_import(path_, "a non-tensor model input; opara takes tensors only. Export with every input a tensor");
          }
          const std::string& name = arg.get_as_tensor().get_name();
          values_[name] = graph_.add_input(name, "Tensor");
          break;
        }
        default:
          fail_import(path_,
                      "an input kind opara does not run (custom object or token). Export the model "
                      "without custom classes or effectful ops");
      }
    }
    for (const ep::InputToBufferSpec* buffer : state) {
      values_[buffer->get_arg().get_name()] = graph_.add_state(
          buffer->get_buffer_name(), std::make_shared<InitialValueOp>(weight(buffer->get_buffer_name())));
    }
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
      if (placeholder == state_.written_back.end() || !values_.count(placeholder->second)) {
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
      auto found = values_.find(name);
      if (found != values_.end()) {
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
    node.set_inputs({named("self", tensor(placeholder)), named("src", tensor(value))});
    node.set_outputs({tensor(fmt::format("{}.written_back", placeholder))});
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

  c10::OperatorHandle find_operator(const std::string& target, const std::string& where) {
    const std::string prefix = "torch.ops.";
    if (target.rfind("_operator.", 0) == 0 || target.rfind("math.", 0) == 0 || target.rfind("torch.sym_", 0) == 0) {
      fail_import(path_,
                  "{}: {} computes with symbolic sizes: the export has dynamic shapes, or a size that depends "
                  "on the data (nonzero, masked selection). opara runs graphs of tensor operators on fixed "
                  "shapes: export without dynamic_shapes, or save the model with TorchScript (.pt) instead",
                  where, target);
    }
    if (target.rfind(prefix, 0) != 0 || target.rfind("torch.ops.higher_order.", 0) == 0) {
      fail_import(path_,
                  "{}: {} is not an operator opara can call (higher-order ops such as cond and "
                  "while_loop, and Python functions, are not supported). Export without data-dependent "
                  "control flow",
                  where, target);
    }
    auto op = dispatcher_operator(target);
    if (!op) {
      fail_import(path_,
                  "{}: the operator {} is not registered in this LibTorch. Load the library that "
                  "defines it first, or export without it",
                  where, target);
    }
    return *op;
  }

  // Turns one serialized argument into a slot of the call; runtime values are appended to
  // `inputs` (the node's inputs), constants folded in.
  ArgumentSlot to_slot(const ep::Argument& arg, std::vector<ValueId>& inputs) {
    using Tag = ep::Argument::Tag;
    ArgumentSlot slot;
    auto runtime_or_constant = [&](const std::string& name) {
      if (auto position = runtime_position(name, inputs)) {
        slot.kind = ArgumentSlot::Kind::kValue;
        slot.positions = {*position};
      } else {
        slot.constant = constant(name);
      }
    };
    switch (arg.tag()) {
      case Tag::AS_NONE: break;
      case Tag::AS_TENSOR: runtime_or_constant(arg.get_as_tensor().get_name()); break;
      case Tag::AS_TENSORS:
        slot.kind = ArgumentSlot::Kind::kTensorList;
        for (const auto& tensor : arg.get_as_tensors()) add_list_element(tensor.get_name(), slot, inputs);
        break;
      case Tag::AS_OPTIONAL_TENSORS:
        slot.kind = ArgumentSlot::Kind::kOptionalTensorList;
        for (const auto& tensor : arg.get_as_optional_tensors()) {
          if (tensor.tag() == ep::OptionalTensorArgument::Tag::AS_NONE) {
            slot.positions.push_back(ArgumentSlot::kNone);
            if (!slot.list_constants.empty()) slot.list_constants.emplace_back();
          } else {
            add_list_element(tensor.get_as_tensor().get_name(), slot, inputs);
          }
        }
        break;
      case Tag::AS_OPTIONAL_TENSOR:
        if (arg.get_as_optional_tensor().tag() == ep::OptionalTensorArgument::Tag::AS_TENSOR) {
          runtime_or_constant(arg.get_as_optional_tensor().get_as_tensor().get_name());
        }
        break;
      case Tag::AS_INT: slot.constant = arg.get_as_int(); break;
      case Tag::AS_INTS: slot.constant = arg.get_as_ints(); break;
      case Tag::AS_FLOAT: slot.constant = arg.get_as_float().get(); break;
      case Tag::AS_FLOATS: {
        std::vector<double> floats;
        for (const auto& value : arg.get_as_floats()) floats.push_back(value.get());
        slot.constant = floats;
        break;
      }
      case Tag::AS_BOOL: slot.constant = arg.get_as_bool(); break;
      case Tag::AS_BOOLS: {
        c10::List<bool> bools;
        for (bool value : arg.get_as_bools()) bools.push_back(value);
        slot.constant = bools;
        break;
      }
      case Tag::AS_STRING: slot.constant = arg.get_as_string(); break;
      case Tag::AS_STRINGS: slot.constant = arg.get_as_strings(); break;
      case Tag::AS_SCALAR_TYPE: slot.constant = to_scalar_type(arg.get_as_scalar_type()); break;
      case Tag::AS_MEMORY_FORMAT: slot.constant = to_memory_format(arg.get_as_memory_format()); break;
      case Tag::AS_LAYOUT: slot.constant = to_layout(arg.get_as_layout()); break;
      case Tag::AS_DEVICE: {
        const ep::Device& device = arg.get_as_device();
        std::string text = device.get_type();
        if (device.get_index()) text += fmt::format(":{}", *device.get_index());
        slot.constant = c10::Device(text);
        break;
      }
      case Tag::AS_SYM_FLOAT: {
        // A float computed in the graph (aten::item of a 0-dim tensor: a Python float under
        // torch.compile), or one export wrote down.
        const ep::SymFloatArgument& value = arg.get_as_sym_float();
        if (value.tag() == ep::SymFloatArgument::Tag::AS_FLOAT) {
          slot.constant = value.get_as_float().get();
        } else if (auto position = runtime_position(value.get_as_name(), inputs)) {
          slot.kind = ArgumentSlot::Kind::kValue;
          slot.positions = {*position};
          slot.wrap_number = true;  // kept where the schema wants a Tensor (wrap_number_for_tensor_argument)
        } else {
          throw Error(fmt::format("the float {} that no earlier node computes", value.get_as_name()));
        }
        break;
      }
      case Tag::AS_SYM_INT:
        if (arg.get_as_sym_int().tag() != ep::SymIntArgument::Tag::AS_INT) throw Error("a symbolic (dynamic) size");
        slot.constant = arg.get_as_sym_int().get_as_int();
        break;
      case Tag::AS_SYM_INTS: {
        std::vector<int64_t> ints;
        for (const auto& value : arg.get_as_sym_ints()) {
          if (value.tag() != ep::SymIntArgument::Tag::AS_INT) throw Error("a symbolic (dynamic) size");
          ints.push_back(value.get_as_int());
        }
        slot.constant = ints;
        break;
      }
      default:
        throw Error(fmt::format("an argument of kind {} (graphs, symbolic values, custom objects)",
                                static_cast<int>(arg.tag())));
    }
    return slot;
  }

  // When `name` is a value computed in the graph, appends it to `inputs` and returns its position
  // there; nullopt for a parameter or constant.
  std::optional<int> runtime_position(const std::string& name, std::vector<ValueId>& inputs) {
    auto found = values_.find(name);
    if (found == values_.end()) return std::nullopt;
    inputs.push_back(found->second);
    return static_cast<int>(inputs.size()) - 1;
  }

  // A list may mix computed values and parameters (aten::lstm takes its hidden state and its
  // weights as lists): parameters are kept in the slot, as kListConstant elements.
  void add_list_element(const std::string& name, ArgumentSlot& slot, std::vector<ValueId>& inputs) {
    if (auto position = runtime_position(name, inputs)) {
      slot.positions.push_back(*position);
      if (!slot.list_constants.empty()) slot.list_constants.emplace_back();
      return;
    }
    if (slot.list_constants.empty()) slot.list_constants.resize(slot.positions.size());
    slot.positions.push_back(ArgumentSlot::kListConstant);
    slot.list_constants.push_back(constant(name));
  }

  at::Tensor constant(const std::string& name) {
    auto found = constants_.find(name);
    if (found == constants_.end()) throw Error(fmt::format("the tensor {} that no earlier node defines", name));
    return found->second;
  }

  void add_node(const ep::Node& node) {
    // A functional write into state whose node may do it in place (ProgramState::in_place).
    const bool in_place = node.get_outputs().size() == 1 && state_.in_place.count(first_name(node.get_outputs()[0]));
    const std::string target = in_place ? in_place_target(node.get_target()) : node.get_target();
    std::string where = fmt::format("node {} ({})", graph_.size(), target);
    if (auto stack = node.get_metadata().find("stack_trace"); stack != node.get_metadata().end()) {
      source_ = last_frame(stack->second);
      where += " at " + source_;
    } else {
      source_.clear();
    }
    const c10::OperatorHandle op = find_operator(target, where);
    const c10::FunctionSchema& schema = op.schema();
    std::unordered_map<std::string, const ep::Argument*> given;
    for (const ep::NamedArgument& named : node.get_inputs()) given[named.get_name()] = &named.get_arg();

    std::vector<ValueId> inputs;
    std::vector<ArgumentSlot> slots;
    std::string constants;
    NodeAliasing aliasing;
    std::vector<std::pair<std::size_t, std::size_t>> runtime_range;  // per schema argument, in `inputs`
    for (const c10::Argument& formal : schema.arguments()) {
      ArgumentSlot slot;
      const std::size_t first_input = inputs.size();
      auto found = given.find(formal.name());
      const bool written_in_node = found != given.end();  // not a schema default
      if (written_in_node) {
        try {
          slot = to_slot(*found->second, inputs);
        } catch (const Error& error) {
          fail_import(path_,
                      "{}: argument {} is {}, which opara cannot run. Export with static shapes and "
                      "plain tensor arguments",
                      where, formal.name(), error.what());
        }
        given.erase(found);
        wrap_number_for_tensor_argument(formal, slot);
      } else if (formal.default_value()) {
        slot.constant = *formal.default_value();
      } else {
        fail_import(path_,
                    "{}: the required argument {} is missing; the program does not match this "
                    "LibTorch's schema {}",
                    where, formal.name(), c10::toString(schema));
      }
      if (slot.kind == ArgumentSlot::Kind::kConstant && !slot.constant.isNone() && written_in_node) {
        constants +=
            fmt::format("{}{}={}", constants.empty() ? "" : ", ", formal.name(), constant_summary(slot.constant));
      }
      const bool writes_argument = formal.alias_info() && formal.alias_info()->isWrite();
      const bool writes_a_parameter =
          (slot.kind == ArgumentSlot::Kind::kConstant && slot.constant.isTensor()) || !slot.list_constants.empty();
      if (writes_argument && slot.kind != ArgumentSlot::Kind::kConstant && !writes_a_parameter) {
        // Tensor(a!) or Tensor(a!)[] (the _foreach_*_ ops): every element is written.
        for (std::size_t k = first_input; k < inputs.size(); ++k) aliasing.writes.push_back(inputs[k]);
      } else if (writes_argument && writes_a_parameter) {
        fail_import(path_,
                    "{} writes the parameter {} in place; opara runs graphs whose weights do not "
                    "change",
                    where, formal.name());
      }
      slots.push_back(std::move(slot));
      runtime_range.emplace_back(first_input, inputs.size());
    }
    if (!given.empty()) {
      fail_import(path_, "{}: argument {} is not in this LibTorch's schema {}. Export the model with torch 2.11", where,
                  given.begin()->first, c10::toString(schema));
    }

    std::vector<ResultUse> results;
    std::vector<std::string> output_names;
    std::vector<std::string> output_types;
    std::vector<int> output_result;  // which schema result each node output comes from
    const auto& outputs = node.get_outputs();
    for (std::size_t i = 0; i < schema.returns().size(); ++i) {
      if (i >= outputs.size()) {
        results.push_back(ResultUse::kDrop);
        continue;
      }
      const ep::Argument& out = outputs[i];
      using Tag = ep::Argument::Tag;
      if (out.tag() == Tag::AS_TENSOR) {
        results.push_back(ResultUse::kValue);
        output_names.push_back(out.get_as_tensor().get_name());
        output_types.emplace_back("Tensor");
        output_result.push_back(static_cast<int>(i));
      } else if (out.tag() == Tag::AS_TENSORS) {
        results.push_back(ResultUse::kUnpackList);
        for (const auto& tensor : out.get_as_tensors()) {
          output_names.push_back(tensor.get_name());
          output_types.emplace_back("Tensor");
          output_result.push_back(static_cast<int>(i));
        }
      } else if (out.tag() == Tag::AS_NONE) {
        results.push_back(ResultUse::kDrop);
      } else if (out.tag() == Tag::AS_SYM_INT && out.get_as_sym_int().tag() == ep::SymIntArgument::Tag::AS_NAME) {
        results.push_back(ResultUse::kValue);
        output_names.push_back(out.get_as_sym_int().get_as_name());
        output_types.emplace_back("SymInt");
        output_result.push_back(static_cast<int>(i));
      } else if (out.tag() == Tag::AS_SYM_FLOAT && out.get_as_sym_float().tag() == ep::SymFloatArgument::Tag::AS_NAME) {
        results.push_back(ResultUse::kValue);
        output_names.push_back(out.get_as_sym_float().get_as_name());
        output_types.emplace_back("SymFloat");
        output_result.push_back(static_cast<int>(i));
      } else {
        fail_import(path_, "{}: result {} has a kind opara cannot bind ({})", where, i, static_cast<int>(out.tag()));
      }
    }

    const NodeId id = graph_.add_node(schema.operator_name().name, inputs, output_types,
                                      node_flags(schema.operator_name().name, &schema, false),
                                      std::make_shared<DispatcherNodeOp>(op, std::move(slots), std::move(results)));
    graph_.set_source(id, source_, std::move(constants));
    const auto& values = graph_.node(id).outputs;
    for (std::size_t i = 0; i < values.size(); ++i) {
      values_[output_names[i]] = values[i];
      graph_.set_value_name(values[i], output_names[i]);
      // A result annotated Tensor(a) is a view of the argument annotated with the same set.
      const c10::Argument& result = schema.returns()[output_result[i]];
      if (!result.alias_info()) continue;
      for (std::size_t a = 0; a < schema.arguments().size(); ++a) {
        const auto& formal = schema.arguments()[a];
        if (formal.alias_info() && formal.alias_info()->beforeSets() == result.alias_info()->beforeSets()) {
          for (std::size_t k = runtime_range[a].first; k < runtime_range[a].second; ++k) {
            aliasing.views.emplace_back(values[i], inputs[k]);
          }
        }
      }
    }
    aliasing_.push_back(std::move(aliasing));
  }

  // FX passes Python numbers where a schema wants a Tensor (aten.mul.Tensor(x, 2.0)); like
  // Python's argument parser, make them wrapped-number tensors, which type promotion ranks
  // below every real tensor. A number computed in the graph (aten::item's) is wrapped at run
  // time (ArgumentSlot::wrap_number), and only where the schema wants a Tensor.
  static void wrap_number_for_tensor_argument(const c10::Argument& formal, ArgumentSlot& slot) {
    auto type = formal.type();
    if (auto optional = type->cast<c10::OptionalType>()) type = optional->getElementType();
    const bool wants_tensor = type->kind() == c10::TypeKind::TensorType;
    slot.wrap_number = slot.wrap_number && wants_tensor;
    if (!wants_tensor || slot.kind != ArgumentSlot::Kind::kConstant) return;
    if (!slot.constant.isDouble() && !slot.constant.isInt() && !slot.constant.isBool()) return;
    slot.constant = wrapped_number(slot.constant.toScalar());
  }

  // The innermost "File "...", line N" of an FX stack trace that is a real file (FX's generated
  // code is named "<eval_with_key>"): the model's own line.
  static std::string last_frame(const std::string& stack) {
    std::string found;
    for (std::size_t at = stack.find("File \""); at != std::string::npos; at = stack.find("File \"", at + 1)) {
      const auto end = stack.find('"', at + 6);
      const auto line = stack.find("line ", end);
      if (end == std::string::npos || line == std::string::npos) break;
      const std::string file = stack.substr(at + 6, end - at - 6);
      const auto digits = stack.find_first_not_of("0123456789", line + 5);
      if (!file.empty() && file[0] != '<')
        found = fmt::format("{}:{}", file, stack.substr(line + 5, digits - line - 5));
    }
    return found;
  }

  static constexpr int kSchemaMajor = 8;

  std::string path_;
  std::shared_ptr<const std::string> bytes_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
  std::string model_name_;
  std::string source_;
  std::unordered_map<std::string, at::Tensor> weights_;    // by state-dict name
  std::unordered_map<std::string, at::Tensor> constants_;  // by graph placeholder name
  std::unordered_map<std::string, ValueId> values_;        // by graph value name
  std::vector<NodeAliasing> aliasing_;                     // by NodeId
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
