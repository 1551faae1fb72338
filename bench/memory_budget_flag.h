#pragma once

// --memory-budget, for `run` and `plan` alike: what CudaOptions::memory_budget takes as text
// ("1.3x", "512MiB", "2GB", bytes), refused with the library's own message.

#include <CLI/CLI.hpp>

#include <string>

#include "opara/error.h"
#include "opara/options.h"

namespace opara::bench {

inline constexpr const char* kDefaultMemoryBudget = "1.3x";

inline CLI::Validator memory_budget_check() {
  return CLI::Validator(
      [](const std::string& value) {
        try {
          options_from_text({{"memory_budget", value}});
          return std::string();
        } catch (const Error& error) {
          return std::string(error.what());
        }
      },
      "BUDGET");
}

}  // namespace opara::bench
