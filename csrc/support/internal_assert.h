#pragma once

// OPARA_ASSERT: the one way opara checks its own invariants. A failed check is a bug in opara,
// never the user's: it throws opara::InternalError (not opara::Error, which is for bad models,
// inputs and options) with the condition, the file and line, and what broke.

#include <string>

#include <fmt/format.h>

#include "opara/error.h"

namespace opara::detail {

[[noreturn]] void internal_assert_failed(const char* condition, const char* file, int line, const std::string& message);

}  // namespace opara::detail

// OPARA_ASSERT(condition, "format {}", args...): throws opara::InternalError when condition is false.
#define OPARA_ASSERT(condition, ...)                                                                     \
  do {                                                                                                   \
    if (!(condition)) {                                                                                  \
      ::opara::detail::internal_assert_failed(#condition, __FILE__, __LINE__, fmt::format(__VA_ARGS__)); \
    }                                                                                                    \
  } while (false)

// OPARA_UNREACHABLE("format {}", args...): a branch no valid state reaches (an unknown enum value).
#define OPARA_UNREACHABLE(...) \
  ::opara::detail::internal_assert_failed("unreachable", __FILE__, __LINE__, fmt::format(__VA_ARGS__))
