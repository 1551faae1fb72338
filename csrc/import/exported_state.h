#pragma once

// What a torch.export program does to its state (buffers and inputs it writes), read before its
// nodes become graph nodes. Two forms reach opara: the default export keeps in-place ops
// (`b_count.add_(1)`); a decomposed one (ep.run_decompositions()) is functional and lists each
// write as an output (BUFFER_MUTATION, USER_INPUT_MUTATION) whose value must be written back.

#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "import/exported_names.h"

namespace opara {

struct ProgramState {
  // Placeholders of the buffers the program writes: state the compiled model keeps.
  std::set<std::string> state_buffers;
  // Functional form: placeholder of each written input or buffer, by the value written back.
  std::unordered_map<std::string, std::string> written_back;
  // Of those values, the ones whose node may write the placeholder itself, as its in-place twin
  // (index_copy -> index_copy_): it takes the placeholder as `self` and nothing reads the old
  // value (or a view of it) after that node. Every other value is copied into its placeholder
  // after the graph.
  std::set<std::string> in_place;
};

// The top-level graph's tensor metadata, by value name.
using TensorValues = std::unordered_map<std::string, ep::TensorMeta>;

// Throws opara::Error naming `source` and the buffer or input when the program gives one a value of
// another dtype or shape (`tensor_values`: a buffer assigned a new tensor), which opara cannot keep.
ProgramState program_state(const ep::GraphSignature& signature, const std::vector<ep::Node>& nodes,
                           const TensorValues& tensor_values, const std::string& source);

// "torch.ops.aten.index_copy.default" -> "torch.ops.aten.index_copy_.default".
std::string in_place_target(const std::string& target);

// The in-place twin a functional write of state is written as (in_place_target's op): the op named
// with a trailing underscore whose arguments are named as this one's; nullopt for an op without
// one, one that writes already, or one that returns an alias. Used where the written value is the
// op's result on the state itself and nothing reads the old state after it.
std::optional<std::string> in_place_twin(const std::string& target);

}  // namespace opara
