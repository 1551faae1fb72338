#include "import/exported_names.h"

namespace opara {
namespace {

using Tag = ep::Argument::Tag;

template <typename Symbolic>
std::optional<std::string> symbol_name(const Symbolic& value) {
  if (value.tag() == Symbolic::Tag::AS_NAME) return value.get_as_name();
  return std::nullopt;
}

template <typename Symbolic>
Symbolic renamed_symbol(Symbolic value, const std::function<std::string(const std::string&)>& rename) {
  if (value.tag() == Symbolic::Tag::AS_NAME) value.set_as_name(rename(value.get_as_name()));
  return value;
}

ep::TensorArgument renamed_tensor(const ep::TensorArgument& tensor,
                                  const std::function<std::string(const std::string&)>& rename) {
  ep::TensorArgument copy;
  copy.set_name(rename(tensor.get_name()));
  return copy;
}

ep::OptionalTensorArgument renamed_optional(ep::OptionalTensorArgument tensor,
                                            const std::function<std::string(const std::string&)>& rename) {
  if (tensor.tag() == ep::OptionalTensorArgument::Tag::AS_TENSOR) {
    tensor.set_as_tensor(renamed_tensor(tensor.get_as_tensor(), rename));
  }
  return tensor;
}

}  // namespace

std::vector<std::string> value_names(const ep::Argument& arg) {
  std::vector<std::string> names;
  switch (arg.tag()) {
    case Tag::AS_TENSOR: names.push_back(arg.get_as_tensor().get_name()); break;
    case Tag::AS_TENSORS:
      for (const auto& tensor : arg.get_as_tensors()) names.push_back(tensor.get_name());
      break;
    case Tag::AS_OPTIONAL_TENSOR:
      if (arg.get_as_optional_tensor().tag() == ep::OptionalTensorArgument::Tag::AS_TENSOR) {
        names.push_back(arg.get_as_optional_tensor().get_as_tensor().get_name());
      }
      break;
    case Tag::AS_OPTIONAL_TENSORS:
      for (const auto& tensor : arg.get_as_optional_tensors()) {
        if (tensor.tag() == ep::OptionalTensorArgument::Tag::AS_TENSOR)
          names.push_back(tensor.get_as_tensor().get_name());
      }
      break;
    case Tag::AS_SYM_INT:
      if (auto name = symbol_name(arg.get_as_sym_int())) names.push_back(*name);
      break;
    case Tag::AS_SYM_INTS:
      for (const auto& value : arg.get_as_sym_ints()) {
        if (auto name = symbol_name(value)) names.push_back(*name);
      }
      break;
    case Tag::AS_SYM_FLOAT:
      if (auto name = symbol_name(arg.get_as_sym_float())) names.push_back(*name);
      break;
    case Tag::AS_SYM_BOOL:
      if (auto name = symbol_name(arg.get_as_sym_bool())) names.push_back(*name);
      break;
    default: break;
  }
  return names;
}

ep::Argument renamed(const ep::Argument& arg, const std::function<std::string(const std::string&)>& rename) {
  ep::Argument copy = arg;
  switch (arg.tag()) {
    case Tag::AS_TENSOR: copy.set_as_tensor(renamed_tensor(arg.get_as_tensor(), rename)); break;
    case Tag::AS_TENSORS: {
      std::vector<ep::TensorArgument> tensors;
      for (const auto& tensor : arg.get_as_tensors()) tensors.push_back(renamed_tensor(tensor, rename));
      copy.set_as_tensors(std::move(tensors));
      break;
    }
    case Tag::AS_OPTIONAL_TENSOR:
      copy.set_as_optional_tensor(renamed_optional(arg.get_as_optional_tensor(), rename));
      break;
    case Tag::AS_OPTIONAL_TENSORS: {
      std::vector<ep::OptionalTensorArgument> tensors;
      for (const auto& tensor : arg.get_as_optional_tensors()) tensors.push_back(renamed_optional(tensor, rename));
      copy.set_as_optional_tensors(std::move(tensors));
      break;
    }
    case Tag::AS_SYM_INT: copy.set_as_sym_int(renamed_symbol(arg.get_as_sym_int(), rename)); break;
    case Tag::AS_SYM_INTS: {
      std::vector<ep::SymIntArgument> values;
      for (const auto& value : arg.get_as_sym_ints()) values.push_back(renamed_symbol(value, rename));
      copy.set_as_sym_ints(std::move(values));
      break;
    }
    case Tag::AS_SYM_FLOAT: copy.set_as_sym_float(renamed_symbol(arg.get_as_sym_float(), rename)); break;
    case Tag::AS_SYM_BOOL: copy.set_as_sym_bool(renamed_symbol(arg.get_as_sym_bool(), rename)); break;
    default: break;
  }
  return copy;
}

std::optional<c10::OperatorHandle> dispatcher_operator(const std::string& target) {
  const std::string prefix = "torch.ops.";
  if (target.rfind(prefix, 0) != 0 || target.rfind("torch.ops.higher_order.", 0) == 0) return std::nullopt;
  const std::string rest = target.substr(prefix.size());
  const auto first = rest.find('.');
  const auto last = rest.rfind('.');
  if (first == std::string::npos || first == last) return std::nullopt;
  const std::string name = rest.substr(0, first) + "::" + rest.substr(first + 1, last - first - 1);
  std::string overload = rest.substr(last + 1);
  if (overload == "default") overload.clear();
  return c10::Dispatcher::singleton().findSchema({name, overload});
}

}  // namespace opara
