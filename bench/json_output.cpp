#include "json_output.h"

#include "support/text_file.h"

namespace opara::bench {

void write_json(const nlohmann::json& json, const std::string& path) {
  write_text_file(path, json.dump(2) + "\n", "the JSON report");
}

}  // namespace opara::bench
