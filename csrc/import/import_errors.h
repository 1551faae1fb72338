#pragma once

#include <fmt/format.h>

#include <string>

#include "opara/error.h"

namespace opara {

// "<file>: <node>: <problem>. <what to do>": the shape of every import error.
template <typename... Args>
[[noreturn]] void fail_import(const std::string& path, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("{}: {}", path, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace opara
