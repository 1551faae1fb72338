#pragma once

#include <string>

namespace opara::bench {

// Renders Graphviz `dot_text` into an SVG file with the `dot` program (Debian: graphviz). Throws
// opara::Error when dot is not installed (saying how to get it) or fails.
void render_svg(const std::string& dot_text, const std::string& svg_path);

}  // namespace opara::bench
