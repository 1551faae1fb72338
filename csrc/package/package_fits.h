#pragma once

#include <string>
#include <vector>

#include "opara/package.h"

namespace opara {

// What this process offers a package: the releases, the device, the CPU's features.
struct PackageHost {
  std::string opara_version;
  std::string torch_version;  // the running LibTorch's release
  bool has_cuda = false;
  std::string cuda_capability;         // "9.0" where a GPU is, else ""
  std::vector<std::string> cpu_flags;  // the CPU's features as ATen names them ("avx512_f", "avx2", "fma3")
};

// Why `info` cannot run on `host` (empty: it can): the first of another package release's opara,
// another torch release (its AOTInductor code links that LibTorch), another device kind or CUDA
// capability (its kernels were compiled for that device), or a CPU without the vector ISA its C++
// kernels were compiled for. Each says how to make a package that fits.
std::string package_misfit(const PackageInfo& info, const PackageHost& host);

// Why the schedule `info` keeps (StoredChoice) is not for a load on `machine` (schedule_machine)
// with the caller's `options` (empty: it is): none kept; measured on another machine; or the
// caller changes an option that decides the schedule (any but those that only say how outputs,
// inputs and failures are handled), naming it.
std::string stored_choice_misfit(const PackageInfo& info, const std::map<std::string, std::string>& options,
                                 const std::string& machine);

// The CPU features the kernels of Inductor's vector ISA need, as ATen names them: "avx512 avx512_vnni"
// (the ISA, then features its kernels use besides) needs avx512_f, _dq, _vl, _bw, fma3 and
// avx512_vnni; empty for none.
std::vector<std::string> cpu_flags_of_isa(const std::string& isa);

// The torch release a version string names: "2.11.0+cu130" -> "2.11.0".
std::string torch_release(const std::string& version);

}  // namespace opara
