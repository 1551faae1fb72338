#pragma once

// The value names a serialized torch.export argument refers to, and the same argument with them
// renamed: what inlining a subgraph and scanning a program's state both walk.

#include <torch/csrc/utils/generated_serialization_types.h>

#include <functional>
#include <optional>
#include <string>
#include <vector>

#include <ATen/core/dispatch/Dispatcher.h>

namespace opara {

namespace ep = torch::_export;

// Names of the tensors and symbolic values `arg` holds (a list's elements too).
std::vector<std::string> value_names(const ep::Argument& arg);

// `arg` with every name value_names() lists replaced by `rename(name)`.
ep::Argument renamed(const ep::Argument& arg, const std::function<std::string(const std::string&)>& rename);

// The dispatcher's operator for an FX target ("torch.ops.aten.add_.Tensor"); nullopt for a
// target that is not one (Python functions, higher-order ops, symbolic arithmetic) or is not
// registered.
std::optional<c10::OperatorHandle> dispatcher_operator(const std::string& target);

}  // namespace opara
