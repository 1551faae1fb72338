#include "support/text_file.h"

#include <fmt/format.h>

#include <fstream>
#include <iostream>

#include "opara/error.h"

namespace opara {

void write_text_file(const std::string& path, std::string_view text, std::string_view what) {
  if (path == "-") {
    if (!(std::cout << text).flush()) throw Error(fmt::format("writing {} to standard output failed", what));
    return;
  }
  std::ofstream file(path);
  if (!file) throw Error(fmt::format("{}: cannot write {} here; check that the folder exists", path, what));
  file << text;
  file.close();
  if (file.fail()) throw Error(fmt::format("{}: writing {} failed (is the disk full?)", path, what));
}

}  // namespace opara
