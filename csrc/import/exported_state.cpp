#include "import/exported_state.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>

#include "import/exported_arguments.h"
#include "opara/error.h"
#include "opara/load.h"

namespace opara {
namespace {

// Per placeholder of interest, the names that may alias it (views, in-place results), and for
// each root the last node (by position) that reads any of them.
struct AliasScan {
  std::unordered_map<std::string, std::string> root;  // name -> placeholder
  std::map<std::string, std::size_t> last_read;       // placeholder -> node position
  std::set<std::string> written;                      // placeholders written in place
};

AliasScan scan_aliases(const std::vector<std::string>& placeholders, const std::vector<ep::Node>& nodes) {
  AliasScan scan;
  for (const std::string& name : placeholders) scan.root[name] = name;
  for (std::size_t position = 0; position < nodes.size(); ++position) {
    const ep::Node& node = nodes[position];
    const auto op = dispatcher_operator(node.get_target());
    std::map<std::string, const ep::Argument*> given;
    for (const ep::NamedArgument& input : node.get_inputs()) given[input.get_name()] = &input.get_arg();
    std::set<std::string> roots_read;
    for (const ep::NamedArgument& input : node.get_inputs()) {
      for (const std::string& name : value_names(input.get_arg())) {
        auto found = scan.root.find(name);
        if (found != scan.root.end()) roots_read.insert(found->second);
      }
    }
    for (const std::string& root : roots_read) scan.last_read[root] = position;
    if (roots_read.empty()) continue;
    if (!op) {
      // Not an operator with a schema: its results may be anything it read.
      for (const ep::Argument& output : node.get_outputs()) {
        for (const std::string& name : value_names(output)) scan.root[name] = *roots_read.begin();
      }
      continue;
    }
    const c10::FunctionSchema& schema = op->schema();
    // The roots behind each alias set of the arguments ("a" of Tensor(a!) self).
    std::map<c10::Symbol, std::string> set_roots;
    for (const c10::Argument& formal : schema.arguments()) {
      auto found = given.find(formal.name());
      if (found == given.end() || !formal.alias_info()) continue;
      for (const std::string& name : value_names(*found->second)) {
        auto root = scan.root.find(name);
        if (root == scan.root.end()) continue;
        if (formal.alias_info()->isWrite()) scan.written.insert(root->second);
        for (const c10::Symbol& set : formal.alias_info()->beforeSets()) set_roots[set] = root->second;
      }
    }
    const auto& outputs = node.get_outputs();
    for (std::size_t i = 0; i < outputs.size() && i < schema.returns().size(); ++i) {
      const auto& alias = schema.returns()[i].alias_info();
      if (!alias) continue;
      for (const c10::Symbol& set : alias->beforeSets()) {
        auto root = set_roots.find(set);
        if (root == set_roots.end()) continue;
        for (const std::string& name : value_names(outputs[i])) scan.root[name] = root->second;
      }
    }
  }
  return scan;
}

// "Long [4, 8]" (a symbolic size by its expression).
std::string describe_meta(const ep::TensorMeta& meta) {
  const auto dtype = to_scalar_type(meta.get_dtype());
  std::vector<std::string> sizes;
  for (const ep::SymInt& size : meta.get_sizes()) {
    sizes.push_back(size.tag() == ep::SymInt::Tag::AS_INT ? std::to_string(size.get_as_int())
                                                          : size.get_as_expr().get_expr_str());
  }
  return fmt::format("{} [{}]", dtype ? std::string(c10::toString(*dtype)) : "an unknown dtype",
                     fmt::join(sizes, ", "));
}

// A written value must keep its state's dtype and shape: opara keeps each buffer (and writes each
// input) as the program received it, where eager would have given the attribute a new tensor (a
// reassigned buffer) and every later call would see that one.
void require_same_dtype_and_shape(const std::string& value, const std::string& placeholder, const std::string& name,
                                  const TensorValues& tensor_values, const std::string& source) {
  const auto written = tensor_values.find(value);
  const auto state = tensor_values.find(placeholder);
  if (written == tensor_values.end() || state == tensor_values.end()) return;
  const std::string was = describe_meta(state->second);
  const std::string becomes = describe_meta(written->second);
  if (was == becomes) return;
  throw Error(fmt::format(
      "{}: the model gives '{}' a new value of {} where it holds {} (a buffer assigned a new tensor, say): opara "
      "keeps each buffer's and input's dtype and shape across calls. Register the buffer with its final dtype and "
      "shape and write it in place (copy_, index_copy_), or return the new value instead",
      source, name, becomes, was));
}

// Whether node `node` at `position` may become its in-place twin writing `placeholder`.
bool may_write_in_place(const ep::Node& node, std::size_t position, const std::string& placeholder,
                        const AliasScan& scan) {
  if (node.get_outputs().size() != 1 || !in_place_twin(node.get_target())) return false;
  const auto& arguments = dispatcher_operator(node.get_target())->schema().arguments();
  const auto& inputs = node.get_inputs();
  const bool self_is_placeholder = !inputs.empty() && inputs.front().get_name() == arguments.front().name() &&
                                   inputs.front().get_arg().tag() == ep::Argument::Tag::AS_TENSOR &&
                                   inputs.front().get_arg().get_as_tensor().get_name() == placeholder;
  auto last = scan.last_read.find(placeholder);
  return self_is_placeholder && last != scan.last_read.end() && last->second == position;
}

}  // namespace

std::string in_place_target(const std::string& target) {
  const auto last = target.rfind('.');
  if (last == std::string::npos || last == 0) return target;
  return target.substr(0, last) + "_" + target.substr(last);
}

std::optional<std::string> in_place_twin(const std::string& target) {
  const auto op = dispatcher_operator(target);
  const std::string twin_target = in_place_target(target);
  const auto twin = dispatcher_operator(twin_target);
  if (!op || !twin || op->schema().is_mutable()) return std::nullopt;
  // A view's twin (t_, squeeze_) changes the tensor's metadata, not its data.
  for (const c10::Argument& result : op->schema().returns()) {
    if (result.alias_info()) return std::nullopt;
  }
  const auto& arguments = op->schema().arguments();
  const auto& twin_arguments = twin->schema().arguments();
  if (arguments.size() != twin_arguments.size() || arguments.empty()) return std::nullopt;
  for (std::size_t i = 0; i < arguments.size(); ++i) {
    if (arguments[i].name() != twin_arguments[i].name()) return std::nullopt;
  }
  return twin_target;
}

ProgramState program_state(const ep::GraphSignature& signature, const std::vector<ep::Node>& nodes,
                           const TensorValues& tensor_values, const std::string& source) {
  ProgramState state;
  std::unordered_map<std::string, std::string> buffer_placeholders;  // by state-dict name
  std::vector<std::string> placeholders;
  for (const ep::InputSpec& spec : signature.get_input_specs()) {
    if (spec.tag() == ep::InputSpec::Tag::BUFFER) {
      const std::string& name = spec.get_buffer().get_arg().get_name();
      buffer_placeholders[spec.get_buffer().get_buffer_name()] = name;
      placeholders.push_back(name);
    } else if (spec.tag() == ep::InputSpec::Tag::USER_INPUT &&
               spec.get_user_input().get_arg().tag() == ep::Argument::Tag::AS_TENSOR) {
      placeholders.push_back(spec.get_user_input().get_arg().get_as_tensor().get_name());
    }
  }
  const AliasScan scan = scan_aliases(placeholders, nodes);
  for (const auto& [buffer, placeholder] : buffer_placeholders) {
    if (scan.written.count(placeholder)) state.state_buffers.insert(placeholder);
  }
  for (const ep::OutputSpec& spec : signature.get_output_specs()) {
    if (spec.tag() == ep::OutputSpec::Tag::BUFFER_MUTATION) {
      const auto& mutation = spec.get_buffer_mutation();
      auto placeholder = buffer_placeholders.find(mutation.get_buffer_name());
      if (placeholder == buffer_placeholders.end()) continue;  // the importer names the missing buffer
      state.state_buffers.insert(placeholder->second);
      state.written_back[mutation.get_arg().get_name()] = placeholder->second;
    } else if (spec.tag() == ep::OutputSpec::Tag::USER_INPUT_MUTATION) {
      const auto& mutation = spec.get_user_input_mutation();
      state.written_back[mutation.get_arg().get_name()] = mutation.get_user_input_name();
    }
  }
  std::unordered_map<std::string, std::string> buffer_of;  // placeholder -> the module's name for it
  for (const auto& [buffer, placeholder] : buffer_placeholders) buffer_of[placeholder] = buffer;
  for (const auto& [value, placeholder] : state.written_back) {
    const auto buffer = buffer_of.find(placeholder);
    require_same_dtype_and_shape(value, placeholder, buffer == buffer_of.end() ? placeholder : buffer->second,
                                 tensor_values, source);
  }
  for (std::size_t position = 0; position < nodes.size(); ++position) {
    const ep::Node& node = nodes[position];
    for (const ep::Argument& output : node.get_outputs()) {
      for (const std::string& name : value_names(output)) {
        auto placeholder = state.written_back.find(name);
        if (placeholder != state.written_back.end() && may_write_in_place(node, position, placeholder->second, scan)) {
          state.in_place.insert(name);
        }
      }
    }
  }
  return state;
}

}  // namespace opara
