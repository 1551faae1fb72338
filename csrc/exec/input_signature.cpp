#include "exec/input_signature.h"

#include <c10/core/impl/DeviceGuardImplInterface.h>
#include <fmt/format.h>
#include <fmt/ranges.h>

#include "exec/shape_text.h"
#include "exec/symbolic_sizes_check.h"
#include "opara/error.h"

namespace opara {
namespace {

// The very memory a static input was compiled on: its storage, offset and strides.
bool is_bound_tensor(const at::Tensor& input, const at::Tensor& bound) {
  return input.is_alias_of(bound) && input.storage_offset() == bound.storage_offset() &&
         input.strides() == bound.strides();
}

}  // namespace

InputSignature::InputSignature(const Graph& graph, const std::vector<at::Tensor>& examples,
                               const std::vector<int>& static_inputs, std::vector<bool> batched)
    : source_path_(graph.source_path), batched_(std::move(batched)) {
  // The caller's inputs: the state buffers after them are the model's own.
  const std::size_t count = graph.caller_input_count();
  if (examples.size() != count) {
    std::vector<std::string> names;
    for (std::size_t i = 0; i < count; ++i) names.push_back(graph.value(graph.inputs()[i]).name);
    throw Error(fmt::format("{}: the model takes {} inputs ({}), {} example inputs were given", source_path_, count,
                            fmt::join(names, ", "), examples.size()));
  }
  check_symbolic_sizes(graph, examples);  // a dynamic-shape program: the sizes it was exported for
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

std::int64_t InputSignature::check(const std::vector<at::Tensor>& inputs) const {
  const bool graph_set = !batched_.empty();
  // A graph set's words: it takes what it takes; a model was compiled for one signature.
  const char* accepts = graph_set ? "the graph set takes" : "the model was compiled for";
  if (inputs.size() != names_.size()) {
    throw Error(fmt::format("{}: {} {} inputs ({}), {} were given", source_path_, accepts, names_.size(),
                            graph_set ? fmt::format("{}", fmt::join(names_, ", ")) : describe(), inputs.size()));
  }
  std::int64_t rows = 0;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const at::Tensor& input = inputs[i];
    // Formatted only for an error: a decode step's run checks dozens of inputs.
    const auto where = [&] { return fmt::format("{}: input {} ('{}')", source_path_, i, names_[i]); };
    const bool batched = graph_set && batched_[i];
    if (!input.defined()) throw Error(where() + " is an undefined tensor");
    if (!fits_shape(i, input)) {
      throw Error(graph_set ? fmt::format("{} has shape {}; {} {}{}", where(), shape_text(input.sizes()), accepts,
                                          expected_shape(i), batched ? " (any number of rows first)" : "")
                            : fmt::format("{} has shape {}, {} {}; compile again for other shapes", where(),
                                          shape_text(input.sizes()), accepts, expected_shape(i)));
    }
    if (input.scalar_type() != dtypes_[i]) {
      throw Error(fmt::format("{} has dtype {}, {} {}; convert it with .to({})", where(),
                              c10::toString(input.scalar_type()), accepts, c10::toString(dtypes_[i]),
                              c10::toString(dtypes_[i])));
    }
    if (input.device() != devices_[i]) {
      throw Error(fmt::format("{} is on {}, {} {}; move it with .to(\"{}\")", where(), input.device().str(), accepts,
                              devices_[i].str(), devices_[i].str()));
    }
    const at::Tensor& bound = bound_[i];
    if (bound.defined() && !is_bound_tensor(input, bound)) {
      throw Error(
          fmt::format("{} is static (the model reads the example tensor's memory where it is), but another "
                      "tensor was given; pass the same tensor, or compile again for the new one",
                      where()));
    }
    if (!batched) continue;
    if (input.size(0) == 0) throw Error(where() + " has no rows");
    if (rows != 0 && rows != input.size(0)) {
      throw Error(
          fmt::format("{} has {} rows, an earlier batched input {}: every batched input has one row per request",
                      where(), input.size(0), rows));
    }
    rows = input.size(0);
  }
  return rows;
}

std::string InputSignature::expected_shape(std::size_t index) const {
  if (batched_.empty() || !batched_[index]) return shape_text(shapes_[index]);
  std::vector<std::string> parts{"*"};
  for (std::size_t d = 1; d < shapes_[index].size(); ++d) parts.push_back(std::to_string(shapes_[index][d]));
  return fmt::format("[{}]", fmt::join(parts, ", "));
}

bool InputSignature::fits_shape(std::size_t index, const at::Tensor& input) const {
  const c10::IntArrayRef expected(shapes_[index]);
  if (batched_.empty() || !batched_[index]) return input.sizes() == expected;
  return input.dim() == static_cast<std::int64_t>(expected.size()) && input.sizes().slice(1) == expected.slice(1);
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
  // On the current stream, which the caller has made wait for the model's last run.
  bound.copy_(input);
  // The memory `input` leaves may be freed at once and reused on the stream it was made on,
  // before the copy above has read it.
  if (!input.is_cpu())
    input.record_stream(c10::impl::getDeviceGuardImpl(input.device().type())->getStream(input.device()));
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
