#include "json_output.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "opara/error.h"

namespace opara::bench {

void write_json(const nlohmann::json& json, const std::string& path) {
  if (path == "-") {
    std::cout << json.dump(2) << "\n";
    return;
  }
  std::ofstream file(path);
  if (!file) throw Error(fmt::format("{}: cannot write the JSON report here", path));
  file << json.dump(2) << "\n";
}

}  // namespace opara::bench
