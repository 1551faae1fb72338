#pragma once

#include <fmt/format.h>

#include <exception>
#include <string>

#include "opara/error.h"

namespace opara {

// The first non-blank line of what an exception says, without the C++ backtrace c10::Error appends
// (for the TorchScript interpreter's errors, the line that gives the reason, after its tracebacks).
std::string first_line(const std::exception& error);

// "<file>: <node>: <problem>. <what to do>": the shape of every import error.
template <typename... Args>
[[noreturn]] void fail_import(const std::string& path, fmt::format_string<Args...> format, Args&&... args) {
  throw Error(fmt::format("{}: {}", path, fmt::format(format, std::forward<Args>(args)...)));
}

}  // namespace opara
