#include "package/package_fits.h"

#include <fmt/format.h>

#include <algorithm>
#include <set>
#include <sstream>

namespace opara {

std::string torch_release(const std::string& version) {
  return version.substr(0, version.find('+'));
}

std::vector<std::string> cpu_flags_of_isa(const std::string& isa) {
  std::istringstream words(isa);
  std::string base;
  words >> base;
  std::vector<std::string> flags;
  // torch/_inductor/cpu_vec_isa.py: VecAVX512's and VecAVX2's arch flags; the words after the
  // ISA's name are features its kernels use besides ("avx512_vnni", "amx_tile", "avx512_bf16"),
  // named as ATen names them.
  if (base == "avx512") flags = {"avx512_f", "avx512_dq", "avx512_vl", "avx512_bw", "fma3"};
  if (base == "avx2") flags = {"avx2", "fma3"};
  for (std::string feature; words >> feature;) flags.push_back(feature);
  return flags;
}

std::string stored_choice_misfit(const PackageInfo& info, const std::map<std::string, std::string>& options,
                                 const std::string& machine) {
  // Options that leave the schedule and its timing as they were.
  static const std::set<std::string> kScheduleFree = {
      "device",        "outputs",        "on_uncapturable", "allow_profile_mismatch",
      "static_inputs", "state_in_place", "warmup_runs"};
  if (info.choice.machine.empty()) return "none kept";
  if (info.choice.machine != machine)
    return fmt::format("measured on {}, and this is {}", info.choice.machine, machine);
  for (const auto& [key, value] : options) {
    const auto kept = info.options.find(key);
    if (!kScheduleFree.count(key) && (kept == info.options.end() || kept->second != value))
      return fmt::format("the caller sets {}", key);
  }
  return {};
}

std::string package_misfit(const PackageInfo& info, const PackageHost& host) {
  const std::string remake = "make the package again with opara.package where it will run";
  if (info.opara_version != host.opara_version) {
    return fmt::format("made by opara {}, and this is opara {}: {}", info.opara_version, host.opara_version, remake);
  }
  if (torch_release(info.torch_version) != torch_release(host.torch_version)) {
    return fmt::format(
        "made with torch {}, and this process runs torch {}: its AOTInductor code links the torch that "
        "compiled it; {}",
        info.torch_version, host.torch_version, remake);
  }
  if (info.device == "cuda" && !host.has_cuda) {
    return fmt::format("made for a CUDA GPU, and none is visible here: load it where a GPU is, or {} for the CPU",
                       remake);
  }
  if (info.device == "cuda" && !info.cuda_capability.empty() && info.cuda_capability != host.cuda_capability) {
    return fmt::format(
        "made for CUDA compute capability {}, and this GPU has {}: its kernels were compiled for "
        "that capability; {}",
        info.cuda_capability, host.cuda_capability, remake);
  }
  if (info.device != "cuda" && info.device != "cpu") {
    return fmt::format("made for device {}, which opara does not run", info.device);
  }
  if (info.device == "cpu") {
    for (const std::string& flag : cpu_flags_of_isa(info.cpu_isa)) {
      if (std::find(host.cpu_flags.begin(), host.cpu_flags.end(), flag) == host.cpu_flags.end()) {
        return fmt::format("its C++ kernels were compiled for {} ({}), which this CPU lacks: {}", info.cpu_isa, flag,
                           remake);
      }
    }
  }
  return {};
}

}  // namespace opara
