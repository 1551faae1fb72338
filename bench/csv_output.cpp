#include "csv_output.h"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <filesystem>
#include <set>
#include <system_error>

#include "opara/error.h"
#include "support/text_file.h"

namespace opara::bench {
namespace {

std::string quoted(const std::string& text) {
  if (text.find_first_of(",\"\n\r") == std::string::npos) return text;
  std::string escaped = "\"";
  for (char c : text) escaped += c == '"' ? std::string("\"\"") : std::string(1, c);
  return escaped + "\"";
}

std::string cell(const nlohmann::json& value) {
  if (value.is_null()) return "";
  if (value.is_string()) return quoted(value.get<std::string>());
  if (value.is_array()) {
    std::vector<std::string> parts;
    for (const auto& part : value) parts.push_back(part.is_string() ? part.get<std::string>() : part.dump());
    return quoted(fmt::format("{}", fmt::join(parts, ";")));
  }
  return quoted(value.dump());
}

}  // namespace

void write_csv(const std::vector<nlohmann::json>& rows, const std::vector<std::string>& first,
               const std::string& path) {
  std::vector<std::string> columns = first;
  std::set<std::string> rest;
  for (const auto& row : rows) {
    for (const auto& [key, value] : row.items()) {
      if (std::find(first.begin(), first.end(), key) == first.end() && !value.is_object()) rest.insert(key);
    }
  }
  columns.insert(columns.end(), rest.begin(), rest.end());

  std::string text = fmt::format("{}\n", fmt::join(columns, ","));
  for (const auto& row : rows) {
    std::vector<std::string> cells;
    for (const std::string& column : columns) cells.push_back(row.contains(column) ? cell(row.at(column)) : "");
    text += fmt::format("{}\n", fmt::join(cells, ","));
  }
  write_text_file(path, text, "the CSV report");
}

std::FILE* table_stream(const std::vector<std::pair<std::string_view, std::string>>& reports) {
  std::vector<std::string_view> on_stdout;
  for (const auto& [flag, path] : reports) {
    if (path == "-") on_stdout.push_back(flag);
  }
  if (on_stdout.size() > 1) {
    throw CLI::ValidationError(
        fmt::format("{} - would all write to stdout; give all but one a file", fmt::join(on_stdout, " - and ")));
  }
  // Two reports to one file: the second would silently replace the first.
  for (std::size_t i = 0; i < reports.size(); ++i) {
    for (std::size_t j = i + 1; j < reports.size(); ++j) {
      const auto& [flag, path] = reports[i];
      const auto& [other_flag, other_path] = reports[j];
      if (path.empty() || path == "-" || other_path.empty() || other_path == "-") continue;
      std::error_code error;
      std::error_code other_error;
      const auto canonical = std::filesystem::weakly_canonical(path, error);
      const auto other_canonical = std::filesystem::weakly_canonical(other_path, other_error);
      if (error || other_error ? path == other_path : canonical == other_canonical) {
        throw CLI::ValidationError(
            fmt::format("{} and {} both write {}; give each report a file of its own", flag, other_flag, path));
      }
    }
  }
  return on_stdout.empty() ? stdout : stderr;
}

}  // namespace opara::bench
