#pragma once

// One serialized argument of an FX node as a slot of its dispatcher call (ArgumentSlot): a tensor
// the graph computes becomes a runtime input of the node, a parameter or a literal is folded in.

#include <ATen/ATen.h>

#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "import/dispatcher_node_op.h"
#include "import/exported_names.h"

namespace opara {

// The names a node's arguments may read.
struct ExportedNames {
  std::unordered_map<std::string, ValueId> values;        // computed so far, by graph value name
  std::unordered_map<std::string, at::Tensor> constants;  // folded in, by graph placeholder name
  // The program's record of each tensor (dtype, device), by name; null where the caller has none.
  const std::unordered_map<std::string, ep::TensorMeta>* recorded = nullptr;
};

// Where an argument is, as its errors name it.
struct ArgumentSite {
  const std::string& path;    // the file
  const std::string& where;   // "node 3 (torch.ops.aten.reshape.default) at model.py:12"
  const std::string& formal;  // the schema argument's name
};

// `arg` as a slot; the graph values it reads are appended to `inputs`. Throws opara::Error naming
// the site, what is wrong and what to do for an argument opara cannot pass: a symbolic size (a
// dynamic-shape export), a name no earlier node defines (a damaged program), a kind the
// dispatcher call cannot take (a subgraph, a custom object).
ArgumentSlot argument_slot(const ep::Argument& arg, const ArgumentSite& site, const ExportedNames& names,
                           std::vector<ValueId>& inputs);

// The serialization schema numbers dtypes its own way (torch/_export/serde/schema.py); nullopt for
// a code this LibTorch does not know.
std::optional<c10::ScalarType> to_scalar_type(ep::ScalarType type);

}  // namespace opara
