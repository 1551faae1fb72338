#include "exec/input_signature.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "opara/error.h"

namespace opara {
namespace {

std::string shape_text(c10::IntArrayRef sizes) {
  return fmt::format("[{}]", fmt::join(sizes, ", "));
}

// The very memory a static input was compiled on: its storage, offset and strides.
bool is_bound_tensor(const at::Tensor& input, const at::Tensor& bound) {
  return input.is_alias_of(bound) && input.storage_offset() == bound.storage_offset() &&
         input.strides() == bound.strides();
}

}  // namespace

InputSignature::InputSignature(const Graph& graph, const std::vector<at::Tensor>& examples,
                               const std::vector<int>& static_inputs)
    : source_path_(graph.source_path) {
  // The caller's inputs: the state buffers after them are the model's own.
  const std::size_t count = graph.caller_input_count();
  if (examples.size() != count) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < count; ++i) names.push_back(graph.value(graph.inputs()[i]).name);
    throw Error(fmt::format("{}: the model takes {} inputs ({}), {} example inputs were given", source_path_, count,
                            fmt::join(names, ", "), examples.size()));
  }
  for (std::size_t i = 0; i < examples.size(); ++i) {
    const std::string& name = graph.value(graph.inputs()[i]).name;
    if (!examples[i].defined())
      throw Error(fmt::format("{}: example input '{}' is an undefined tensor", source_path_, name));
    names_.push_back(name);
    shapes_.push_back(examples[i].sizes().vec());
    dtypes_.push_back(examples[i].scalar_type());
    devices_.push_back(examples[i].device());
  }
  bound_.resize(examples.size());
  for (int index : static_inputs) {
    if (index < 0 || static_cast<std::size_t>(index) >= examples.size()) {
      throw Error(fmt::format("{}: static input {} does not exist; the model takes {} inputs ({})", source_path_, index,
                              examples.size(), describe()));
    }
    bound_[index] = examples[index];
  }
}

void InputSignature::check(const std::vector<at::Tensor>& inputs) const {
  if (inputs.size() != names_.size()) {
    throw Error(fmt::format("{}: the model was compiled for {} inputs ({}), {} were given", source_path_, names_.size(),
                            describe(), inputs.size()));
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& input = inputs[i];
    const std::string where = fmt::format("{}: input {} ('{}')", source_path_, i, names_[i]);
    if (!input.defined()) throw Error(where + " is an undefined tensor");
    if (input.sizes() != c10::IntArrayRef(shapes_[i])) {
      throw Error(fmt::format("{} has shape {}, the model was compiled for {}; compile again for other shapes", where,
                              shape_text(input.sizes()), shape_text(shapes_[i])));
    }
    if (input.scalar_type() != dtypes_[i]) {
      throw Error(fmt::format("{} has dtype {}, the model was compiled for {}; convert it with .to({})", where,
                              c10::toString(input.scalar_type()), c10::toString(dtypes_[i]),
                              c10::toString(dtypes_[i])));
    }
    if (input.device() != devices_[i]) {
      throw Error(fmt::format("{} is on {}, the model was compiled for {}; move it with .to(\"{}\")", where,
                              input.device().str(), devices_[i].str(), devices_[i].str()));
    }
    const at::Tensor& bound = bound_[i];
    if (bound.defined() && !is_bound_tensor(input, bound)) {
      throw Error(
          fmt::format("{} is static (the model reads the example tensor's memory where it is), but another "
                      "tensor was given; pass the same tensor, or compile again for the new one",
                      where));
    }
  }
}

bool InputSignature::adopt(std::size_t index, const at::Tensor& input) const {
  const at::Tensor& bound = bound_.at(index);
  if (!bound.defined() || !input.defined()) return false;
  if (is_bound_tensor(input, bound)) return true;
  if (input.sizes() != bound.sizes() || input.strides() != bound.strides() ||
      input.scalar_type() != bound.scalar_type() || input.device() != bound.device()) {
    return false;
  }
  // One holder, ours: no tensor of the caller's (nor a view of one) sees this memory any more.
  if (bound.storage().use_count() != 1) return false;
  bound.copy_(input);
  input.set_(bound);
  return true;
}

std::string InputSignature::describe() const {
  std::vector<std::string> parts;
  for (std::size_t i = 0; i < names_.size(); ++i) {
    parts.push_back(
        fmt::format("{}: {}{} on {}", names_[i], c10::toString(dtypes_[i]), shape_text(shapes_[i]), devices_[i].str()));
  }
  return fmt::format("{}", fmt::join(parts, ", "));
}

}  // namespace opara
