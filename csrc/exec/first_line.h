#pragma once

#include <exception>
#include <string>

namespace opara {

// The first non-blank line of what an exception says, without the C++ backtrace c10::Error appends
// (for the TorchScript interpreter's errors, the line that gives the reason, after its tracebacks).
std::string first_line(const std::exception& error);

}  // namespace opara
