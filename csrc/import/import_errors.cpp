#include "import_errors.h"

#include <c10/util/Exception.h>

namespace opara {

std::string first_line(const std::exception& error) {
  std::string text = error.what();
  if (const auto* c10_error = dynamic_cast<const c10::Error*>(&error)) text = c10_error->what_without_backtrace();
  const auto end = text.find('\n');
  return end == std::string::npos ? text : text.substr(0, end);
}

}  // namespace opara
