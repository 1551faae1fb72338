#pragma once

// Range checks for numeric flags. CLI11's PositiveNumber and NonNegativeNumber report their range
// up to the largest double, 300 digits long; these say what the flag needs in a few words.

#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <cstdlib>
#include <functional>
#include <string>

namespace opara::bench {

// A validator that returns `complaint(value)` for a number it refuses (empty: accepted). A value
// that is not a number passes here, and CLI11's conversion to the flag's type reports it.
inline CLI::Validator number_check(std::function<std::string(double)> complaint, std::string type_name) {
  return CLI::Validator(
      [complaint = std::move(complaint)](std::string& input) -> std::string {
        char* end = nullptr;
        const double value = std::strtod(input.c_str(), &end);
        if (end == input.c_str() || *end != '\0') return {};
        const std::string text = complaint(value);
        return text.empty() ? text : fmt::format("{}, not {}", text, input);
      },
      std::move(type_name));
}

// Refuses a number above `most`, saying why (`why`: "the cores here").
inline CLI::Validator number_at_most(double most, const std::string& why) {
  return number_check(
      [most, why](double value) { return value > most ? fmt::format("must be at most {} ({})", most, why) : ""; }, "");
}

inline const CLI::Validator kPositive =
    number_check([](double value) { return value > 0 ? "" : "must be positive"; }, "POSITIVE");
inline const CLI::Validator kNonNegative =
    number_check([](double value) { return value >= 0 ? "" : "must be 0 or more"; }, "NONNEGATIVE");

}  // namespace opara::bench
