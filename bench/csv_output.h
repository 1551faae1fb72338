#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace opara::bench {

// Writes `rows` (JSON objects) as CSV to `path` ("-" is standard output): a header of `first`
// and then every other key the rows have, sorted; a row lacking a key leaves its cell empty.
// Strings are quoted when they need it (RFC 4180); arrays are joined with ';'.
void write_csv(const std::vector<nlohmann::json>& rows, const std::vector<std::string>& first, const std::string& path);

// Where a command prints its table: stdout, or stderr when one of its reports (flag, path) goes to
// stdout ('-'). Two reports on stdout would mix, and two to one file would leave only the last:
// usage errors naming their flags.
std::FILE* table_stream(const std::vector<std::pair<std::string_view, std::string>>& reports);

}  // namespace opara::bench
