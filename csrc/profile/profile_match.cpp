// Whether a profile belongs to the model, device and inputs at hand. Demands measured on another
// GPU (other SM count, other limits), another model file, or other input shapes (other grids) would
// order the launches by numbers that describe something else, silently: refuse, saying what
// differs, unless the caller allows it.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <iostream>

#include "opara/error.h"
#include "opara/profile.h"

namespace opara {
namespace {

std::string describe_inputs(const std::vector<ProfileInput>& inputs) {
  std::vector<std::string> parts;
  parts.reserve(inputs.size());
  for (const ProfileInput& input : inputs)
    parts.push_back(fmt::format("{}[{}]", input.dtype, fmt::join(input.sizes, "x")));
  return parts.empty() ? "no inputs" : fmt::format("{}", fmt::join(parts, ", "));
}

std::string describe_device(const DeviceLimits& device) {
  return fmt::format("{} (compute capability {}.{}, {} SMs)", device.name, device.compute_major, device.compute_minor,
                     device.sm_count);
}

}  // namespace

std::vector<std::string> profile_mismatches(const Profile& profile, const ProfileMatch& match) {
  std::vector<std::string> differences;
  const bool same_structure =
      match.model_structure && !profile.model_structure.empty() && *match.model_structure == profile.model_structure;
  if (match.model_hash && *match.model_hash != profile.model_hash && !same_structure) {
    differences.push_back(fmt::format("model: the profile is of a model file with hash {} ({}), this one has {}",
                                      profile.model_hash, profile.model_path, *match.model_hash));
  }
  if (match.device) {
    const DeviceLimits& device = *match.device;
    if (device.name != profile.device.name || device.compute_major != profile.device.compute_major ||
        device.compute_minor != profile.device.compute_minor || device.sm_count != profile.device.sm_count) {
      differences.push_back(fmt::format("device: the profile was made on {}, this is {}",
                                        describe_device(profile.device), describe_device(device)));
    }
  }
  if (match.inputs && *match.inputs != profile.inputs) {
    differences.push_back(fmt::format("input shapes: the profile was made for {}, the inputs are {}",
                                      describe_inputs(profile.inputs), describe_inputs(*match.inputs)));
  }
  return differences;
}

void require_profile_matches(const Profile& profile, const ProfileMatch& match, const std::string& path) {
  const std::vector<std::string> differences = profile_mismatches(profile, match);
  if (differences.empty()) return;
  const std::string listed = fmt::format("{}", fmt::join(differences, "; "));
  if (match.allow_mismatch) {
    const std::string warning =
        fmt::format("{}: using a profile made for something else, as allowed: {}", path, listed);
    if (match.warn) {
      match.warn(warning);
    } else {
      std::cerr << "Warning: " << warning << "\n";
    }
    return;
  }
  throw Error(fmt::format(
      "{}: the profile does not fit: {}. Profile this model again here (opara-bench profile), or allow a mismatched "
      "profile (--allow-profile-mismatch, Options::costs.allow_profile_mismatch)",
      path, listed));
}

}  // namespace opara
