#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "import/exported_names.h"
#include "opara/graph.h"

namespace opara {

// The sizes of a caller's input as its metadata in a program records them: fixed, or a symbol with
// the range `ranges` gives it (Graph::symbolic_input_sizes). Throws opara::Error naming the file
// and the input for a size that is an expression of symbols (2 * s0), which opara cannot bind.
std::vector<InputSize> exported_input_sizes(const ep::TensorMeta& meta,
                                            const std::unordered_map<std::string, ep::RangeConstraint>& ranges,
                                            const std::string& path, const std::string& input);

// The export's guards (ExportedProgram::guards_code) over `inputs[i]`, the caller's inputs by
// their names in `input_names`: the access L['t'][0] is the input named t_0, as torch.export names
// placeholders. Throws opara::Error naming the file and the guard for one that reads something
// else.
std::vector<InputGuard> exported_input_guards(const std::vector<std::string>& guards_code,
                                              const std::vector<std::string>& input_names, const std::string& path);

// Whether any of `sizes` is symbolic.
bool any_symbolic(const std::vector<InputSize>& sizes);

}  // namespace opara
