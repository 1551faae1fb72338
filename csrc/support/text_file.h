#pragma once

#include <string>
#include <string_view>

namespace opara {

// Writes `text` to the file at `path` ("-": standard output) and checks that every byte landed:
// a full disk shows only when the stream is flushed. Throws opara::Error naming the path and
// `what` ("the JSON report", "the profile") otherwise.
void write_text_file(const std::string& path, std::string_view text, std::string_view what);

}  // namespace opara
