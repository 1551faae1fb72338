#pragma once

#include <nlohmann/json.hpp>
#include <string>

namespace opara::bench {

// Writes `json` to `path` ("-" is standard output), pretty-printed.
void write_json(const nlohmann::json& json, const std::string& path);

}  // namespace opara::bench
