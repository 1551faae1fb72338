#include "exec/first_line.h"

#include <c10/util/Exception.h>

#include <algorithm>

namespace opara {

std::string first_line(const std::exception& error) {
  std::string text = error.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) text = c10_error->what_without_backtrace();
  // The TorchScript interpreter leads with "The following operation failed" and two tracebacks;
  // the reason is the last line ("RuntimeError: Expected 4-dimensional input ...").
  if (text.rfind("The following operation failed in the TorchScript interpreter", 0) == 0) {
    const auto reason = text.rfind("\nRuntimeError: ");
    if (reason != std::string::npos) text = text.substr(reason + std::string("\nRuntimeError: ").size());
  }
  std::size_t start = 0;
  while (start < text.size()) {
    const auto end = std::min(text.find('\n', start), text.size());
    const auto line = text.substr(start, end - start);
    if (line.find_first_not_of(" \t") != std::string::npos) return line;
    start = end + 1;
  }
  return text;
}

}  // namespace opara
