#include "svg_render.h"

#include <fmt/format.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <vector>

#include "opara/error.h"
#include "support/text_file.h"

extern char** environ;

namespace opara::bench {

void render_svg(const std::string& dot_text, const std::string& svg_path) {
  std::string dot_path = (std::filesystem::temp_directory_path() / "opara-XXXXXX.dot").string();
  const int descriptor = mkstemps(dot_path.data(), 4);
  if (descriptor < 0) throw Error(fmt::format("cannot make a temporary DOT file: {}", std::strerror(errno)));
  close(descriptor);
  struct Remove {
    std::string path;
    ~Remove() { std::filesystem::remove(path); }
  } remove{dot_path};
  write_text_file(dot_path, dot_text, "the DOT file");

  // No shell: the paths go to dot as they are.
  std::vector<std::string> words = {"dot", "-Tsvg", dot_path, "-o", svg_path};
  std::vector<char*> argv;
  for (std::string& word : words) argv.push_back(word.data());
  argv.push_back(nullptr);
  pid_t child = 0;
  const int spawned = posix_spawnp(&child, "dot", nullptr, nullptr, argv.data(), environ);
  if (spawned == ENOENT) {
    throw Error(
        fmt::format("--svg needs Graphviz's dot, which is not installed here (Debian: apt-get install "
                    "graphviz); --dot writes the DOT text without it"));
  }
  if (spawned != 0) throw Error(fmt::format("cannot run Graphviz's dot: {}", std::strerror(spawned)));
  int status = 0;
  while (waitpid(child, &status, 0) < 0 && errno == EINTR) {
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    throw Error(fmt::format("{}: Graphviz's dot failed to render the SVG (see its message above)", svg_path));
  }
}

}  // namespace opara::bench
