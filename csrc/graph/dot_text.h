#pragma once

#include <string>

namespace opara {

// A DOT string literal's body: quotes and backslashes escaped.
std::string dot_escape(const std::string& text);

}  // namespace opara
