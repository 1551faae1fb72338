// Arguments fall in three groups: tensors (and lists of them), which are the node's runtime inputs
// when an earlier node computes them and folded-in parameters otherwise; literals (ints, dtypes,
// devices), folded in; and symbolic values (a float aten::item computes, a size a dynamic-shape
// program computes from its inputs' sizes, a condition on sizes), runtime inputs of the node.
#include "import/exported_arguments.h"

#include <fmt/format.h>

#include "import/import_errors.h"

namespace opara {
namespace {

using Tag = ep::Argument::Tag;

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

c10::Device to_device(const ep::Device& device) {
  std::string text = device.get_type();
  if (device.get_index()) text += fmt::format(":{}", *device.get_index());
  return c10::Device(text);
}

// The kinds no dispatcher call of a plain tensor operator takes, as a user would name them.
std::string kind_name(Tag tag) {
  switch (tag) {
    case Tag::AS_GRAPH: return "a subgraph (the body of a higher-order op)";
    case Tag::AS_CUSTOM_OBJ: return "a custom class object (torch.classes)";
    case Tag::AS_OPERATOR: return "an operator passed as a value";
    case Tag::AS_COMPLEX: return "a complex number";
    case Tag::AS_SYM_FLOATS: return "a list of symbolic floats";
    case Tag::AS_NESTED_TENSORS: return "a nested list of tensors";
    case Tag::AS_INT_LISTS: return "a list of int lists";
    case Tag::AS_STRING_TO_ARGUMENT: return "a dictionary";
    default: return fmt::format("an argument of serialized kind {}", static_cast<int>(tag));
  }
}

// Builds the slot of one argument, appending the graph values it reads to the node's inputs.
class SlotBuilder {
 public:
  SlotBuilder(const ArgumentSite& site, const ExportedNames& names, std::vector<ValueId>& inputs)
      : site_(site), names_(names), inputs_(inputs) {}

  ArgumentSlot build(const ep::Argument& arg) {
    switch (arg.tag()) {
      case Tag::AS_NONE: break;
      case Tag::AS_TENSOR: bind_tensor(arg.get_as_tensor().get_name()); break;
      case Tag::AS_OPTIONAL_TENSOR:
        if (arg.get_as_optional_tensor().tag() == ep::OptionalTensorArgument::Tag::AS_TENSOR) {
          bind_tensor(arg.get_as_optional_tensor().get_as_tensor().get_name());
        }
        break;
      case Tag::AS_TENSORS:
        slot_.kind = ArgumentSlot::Kind::kTensorList;
        for (const auto& tensor : arg.get_as_tensors()) add_list_element(tensor.get_name());
        break;
      case Tag::AS_OPTIONAL_TENSORS: bind_optional_tensors(arg.get_as_optional_tensors()); break;
      case Tag::AS_SYM_FLOAT: bind_sym_float(arg.get_as_sym_float()); break;
      case Tag::AS_SYM_INT: bind_sym_int(arg.get_as_sym_int()); break;
      case Tag::AS_SYM_INTS: bind_sym_ints(arg.get_as_sym_ints()); break;
      case Tag::AS_SYM_BOOL: bind_sym_bool(arg.get_as_sym_bool()); break;
      case Tag::AS_SYM_BOOLS:
        fail_import(site_.path,
                    "{}: argument {} is a list of conditions on symbolic sizes, which opara does not "
                    "pass. {}",
                    site_.where, site_.formal, kDynamicShapesFix);
      default: slot_.constant = literal(arg);
    }
    return std::move(slot_);
  }

 private:
  // A number, string, list of them, dtype, layout, memory format or device, folded in.
  c10::IValue literal(const ep::Argument& arg) const {
    switch (arg.tag()) {
      case Tag::AS_INT: return arg.get_as_int();
      case Tag::AS_INTS: return arg.get_as_ints();
      case Tag::AS_FLOAT: return arg.get_as_float().get();
      case Tag::AS_FLOATS: {
        std::vector<double> floats;
        for (const auto& value : arg.get_as_floats()) floats.push_back(value.get());
        return floats;
      }
      case Tag::AS_BOOL: return arg.get_as_bool();
      case Tag::AS_BOOLS: {
        c10::List<bool> bools;
        for (bool value : arg.get_as_bools()) bools.push_back(value);
        return bools;
      }
      case Tag::AS_STRING: return arg.get_as_string();
      case Tag::AS_STRINGS: return arg.get_as_strings();
      case Tag::AS_SCALAR_TYPE: return scalar_type(arg.get_as_scalar_type());
      case Tag::AS_MEMORY_FORMAT: return to_memory_format(arg.get_as_memory_format());
      case Tag::AS_LAYOUT: return to_layout(arg.get_as_layout());
      case Tag::AS_DEVICE: return to_device(arg.get_as_device());
      default:
        fail_import(site_.path,
                    "{}: argument {} is {}, which opara cannot pass to an operator. Export the model without "
                    "it: opara runs tensor operators whose other arguments are numbers, strings, dtypes or devices",
                    site_.where, site_.formal, kind_name(arg.tag()));
    }
  }

  c10::ScalarType scalar_type(ep::ScalarType type) const {
    if (auto known = to_scalar_type(type)) return *known;
    fail_import(site_.path,
                "{}: argument {} is a dtype of code {}, which this LibTorch does not know. Export the model "
                "again with torch " TORCH_VERSION,
                site_.where, site_.formal, static_cast<int>(type));
  }

  // A size: a number export wrote down, or one the graph computes (aten::sym_size of an input, a
  // product of sizes: a dynamic-shape program), a runtime input of the node.
  void bind_sym_int(const ep::SymIntArgument& value) {
    if (value.tag() == ep::SymIntArgument::Tag::AS_INT) {
      slot_.constant = value.get_as_int();
    } else {
      bind_runtime_number("size", value.get_as_name());
    }
  }

  // A list of sizes (view's, new_zeros'): constants, or some computed in the graph, the list then
  // made at run time (ArgumentSlot::Kind::kIntList).
  void bind_sym_ints(const std::vector<ep::SymIntArgument>& values) {
    std::vector<int64_t> ints;
    std::vector<int> positions;
    bool computed = false;
    for (const auto& value : values) {
      if (value.tag() == ep::SymIntArgument::Tag::AS_INT) {
        ints.push_back(value.get_as_int());
        positions.push_back(ArgumentSlot::kListConstant);
        continue;
      }
      auto position = runtime_position(value.get_as_name());
      if (!position) fail_damaged("size", value.get_as_name());
      ints.push_back(0);
      positions.push_back(*position);
      computed = true;
    }
    slot_.constant = ints;
    if (computed) {
      slot_.kind = ArgumentSlot::Kind::kIntList;
      slot_.positions = std::move(positions);
    }
  }

  // A condition on sizes (aten::_assert_scalar's: a dynamic-shape program checks its inputs).
  void bind_sym_bool(const ep::SymBoolArgument& value) {
    if (value.tag() == ep::SymBoolArgument::Tag::AS_BOOL) {
      slot_.constant = value.get_as_bool();
    } else {
      bind_runtime_number("condition", value.get_as_name());
    }
  }

  void bind_runtime_number(const char* what, const std::string& name) {
    auto position = runtime_position(name);
    if (!position) fail_damaged(what, name);
    slot_.kind = ArgumentSlot::Kind::kValue;
    slot_.positions = {*position};
    slot_.wrap_number = true;  // kept where the schema wants a Tensor (wrap_number_for_tensor_argument)
  }

  // A float computed in the graph (aten::item of a 0-dim tensor: a Python float under
  // torch.compile), or one export wrote down.
  void bind_sym_float(const ep::SymFloatArgument& value) {
    if (value.tag() == ep::SymFloatArgument::Tag::AS_FLOAT) {
      slot_.constant = value.get_as_float().get();
    } else {
      bind_runtime_number("float", value.get_as_name());
    }
  }

  void bind_tensor(const std::string& name) {
    if (auto position = runtime_position(name)) {
      slot_.kind = ArgumentSlot::Kind::kValue;
      slot_.positions = {*position};
    } else {
      slot_.constant = constant(name);
    }
  }

  void bind_optional_tensors(const std::vector<ep::OptionalTensorArgument>& tensors) {
    slot_.kind = ArgumentSlot::Kind::kOptionalTensorList;
    for (const auto& tensor : tensors) {
      if (tensor.tag() == ep::OptionalTensorArgument::Tag::AS_NONE) {
        slot_.positions.push_back(ArgumentSlot::kNone);
        if (!slot_.list_constants.empty()) slot_.list_constants.emplace_back();
      } else {
        add_list_element(tensor.get_as_tensor().get_name());
      }
    }
  }

  // A list may mix computed values and parameters (aten::lstm takes its hidden state and its
  // weights as lists): parameters are kept in the slot, as kListConstant elements.
  void add_list_element(const std::string& name) {
    if (auto position = runtime_position(name)) {
      slot_.positions.push_back(*position);
      if (!slot_.list_constants.empty()) slot_.list_constants.emplace_back();
      return;
    }
    if (slot_.list_constants.empty()) slot_.list_constants.resize(slot_.positions.size());
    slot_.positions.push_back(ArgumentSlot::kListConstant);
    slot_.list_constants.push_back(constant(name));
  }

  // When `name` is a value computed in the graph, appends it to the node's inputs and returns its
  // position there; nullopt for a parameter or constant.
  std::optional<int> runtime_position(const std::string& name) {
    auto found = names_.values.find(name);
    if (found == names_.values.end()) return std::nullopt;
    inputs_.push_back(found->second);
    return static_cast<int>(inputs_.size()) - 1;
  }

  at::Tensor constant(const std::string& name) const {
    auto found = names_.constants.find(name);
    if (found == names_.constants.end()) fail_damaged("tensor", name);
    return found->second;
  }

  // torch.export writes every node after the nodes and placeholders it reads.
  [[noreturn]] void fail_damaged(const char* what, const std::string& name) const {
    fail_import(site_.path,
                "{}: argument {} reads the {} {}, which no placeholder or earlier node defines; the program is "
                "damaged. Write the file again with torch.export.save",
                site_.where, site_.formal, what, name);
  }

  const ArgumentSite& site_;
  const ExportedNames& names_;
  std::vector<ValueId>& inputs_;
  ArgumentSlot slot_;
};

}  // namespace

ArgumentSlot argument_slot(const ep::Argument& arg, const ArgumentSite& site, const ExportedNames& names,
                           std::vector<ValueId>& inputs) {
  return SlotBuilder(site, names, inputs).build(arg);
}

std::optional<c10::ScalarType> to_scalar_type(ep::ScalarType type) {
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
    default: return std::nullopt;
  }
}

}  // namespace opara
