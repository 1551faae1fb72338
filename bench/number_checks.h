#pragma once

// Range checks for numeric flags. CLI11's PositiveNumber and NonNegativeNumber report their range
// up to the largest double, 300 digits long; these say what the flag needs in a few words.

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <string>

namespace opara::bench {

// Refuses a number below `least`; a value that is not a number passes here, and CLI11's conversion
// to the flag's type reports it.
inline CLI::Validator number_at_least(double least, const std::string& what) {
  return CLI::Validator(
      [least, what](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(input.c_str(), &end);
        if (end == input.c_str() || *end != '\0') return {};
        return value < least ? "must be " + what + ", not " + input : std::string();
      },
      what == "positive" ? "POSITIVE" : "NONNEGATIVE");
}

// Refuses a number above `most`, saying why (`what`: "the cores here").
inline CLI::Validator number_at_most(double most, const std::string& what) {
  return CLI::Validator(
      [most, what](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(input.c_str(), &end);
        if (end == input.c_str() || *end != '\0') return {};
        return value > most ? fmt::format("must be at most {} ({}), not {}", most, what, input) : std::string();
      },
      "");
}

inline const CLI::Validator kPositive = number_at_least(1e-300, "positive");
inline const CLI::Validator kNonNegative = number_at_least(0, "0 or more");

}  // namespace opara::bench
