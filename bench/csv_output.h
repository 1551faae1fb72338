#pragma once

#include <nlohmann/json.hpp>

#include <cstdio>
#include <string>
#include <vector>

namespace opara::bench {

// Writes `rows` (JSON objects) as CSV to `path` ("-" is standard output): a header of `first`
// and then every other key the rows have, sorted; a row lacking a key leaves its cell empty.
// Strings are quoted when they need it (RFC 4180); arrays are joined with ';'.
void write_csv(const std::vector<nlohmann::json>& rows, const std::vector<std::string>& first, const std::string& path);

// Where a command prints its table: stdout, or stderr when a --json or --csv report goes to
// stdout ('-'). Both reports on stdout would mix: a usage error.
std::FILE* table_stream(const std::string& json, const std::string& csv);

}  // namespace opara::bench
