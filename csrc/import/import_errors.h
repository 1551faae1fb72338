#pragma once

#include <fmt/format.h>
// TORCH_VERSION: the release an archive should be written with, named where one is refused.
#include <torch/version.h>

#include <string>

#include "opara/error.h"

namespace opara {

// "<file>: <node>: <problem>. <what to do>": the shape of every import error.
template <typename... Args>
[[noreturn]] void fail_import(const std::string& path, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("{}: {}", path, fmt::format(format, std::forward<Args>(args)...)));
}

// What to do about a symbolic size, wherever in a program one shows (an argument, a weight's
// metadata): opara runs graphs of fixed shapes, and torch.compile hands it one per shape.
inline constexpr const char* kDynamicShapesFix =
    "opara runs dynamic-shape programs whose symbolic sizes are their inputs' sizes and arithmetic on them. "
    "Export the model with static example shapes (no dynamic_shapes) or with each varying size a Dim of its own, "
    "or compile it with torch.compile(model, backend=\"opara\")";

}  // namespace opara
