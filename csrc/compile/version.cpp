#include "opara/version.h"

#include <ATen/Version.h>
#include <fmt/format.h>
#include <torch/version.h>

#include <regex>

namespace opara {
namespace {

// The loaded LibTorch's own TORCH_VERSION, from the build settings it reports (at::show_config:
// "..., TORCH_VERSION=2.15.0, USE_CUDA=ON, ..."), which it compiled into itself.
std::string running_torch_version() {
  static const std::string version = [] {
    const std::string config = at::show_config();
    std::smatch match;
    if (std::regex_search(config, match, std::regex(R"(TORCH_VERSION=([0-9][0-9A-Za-z.+]*))"))) return match[1].str();
    return std::string("unknown");
  }();
  return version;
}

}  // namespace

VersionInfo version() {
  return {OPARA_VERSION, TORCH_VERSION, running_torch_version()};
}

std::string to_string(const VersionInfo& version) {
  return fmt::format("opara {}, built against torch {}, running torch {}", version.opara, version.torch_built,
                     version.torch_running);
}

}  // namespace opara
