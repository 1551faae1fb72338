#pragma once

#include <ATen/core/function_schema.h>
#include <ATen/core/ivalue.h>

#include <cstdint>
#include <string>
#include <string_view>

namespace opara {

// Graph node flags (opara::NodeFlag) from an operator's schema (views, in-place writes) and the op
// table. Without a schema (prim ops), `makes_tensor` says whether the node creates a tensor.
std::uint32_t node_flags(std::string_view kind, const c10::FunctionSchema* schema, bool makes_tensor);

// A short printable form of a folded constant: "Tensor[64, 3, 7, 7]", "[2, 2]", "0.5".
std::string constant_summary(const c10::IValue& value);

}  // namespace opara
