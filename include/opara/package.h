#pragma once

// Ahead-of-time packages: one file holding a program, the plan that cut its regions, each region
// compiled by AOTInductor, and what it was made for. opara.package (Python) writes one; this loads
// it without Python (docs/usage.md, "Packages").

#include <ATen/core/Tensor.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "opara/compiled_model.h"
#include "opara/export.h"
#include "opara/options.h"

namespace opara {

// The schedule a load of a package measured (chosen_schedule_options: the CPU tuner's cap and
// threads, CUDA's measured cap) and the machine it was measured on (schedule_machine), kept in the
// package (opara/choice.json), so that a later load there compiles it without timing again.
struct StoredChoice {
  std::string machine;  // empty: none kept
  std::map<std::string, std::string> options;
};

// What a package was made for and from (its opara/meta.json).
struct PackageInfo {
  std::string name;             // the model, as the package's messages name it
  std::string opara_version;    // "0.1.0"
  std::string torch_version;    // "2.11.0+cpu": the torch that compiled its regions
  std::string device;           // "cpu" or "cuda"
  std::string cuda_capability;  // "9.0" (CUDA packages)
  std::string cpu_isa;          // Inductor's vector ISA for the CPU's kernels: "avx512", "avx2", "" (none)
  std::map<std::string, std::string> options;  // the compile options it was made with (opara.compile's)
  std::size_t regions = 0;                     // regions compiled by AOTInductor
  // Each input's dtype as Python names it ("float32") and sizes: what a call passes.
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> input_signature;
  bool holds_example_inputs = true;         // false: a compile cache entry, loaded with the caller's inputs
  std::vector<std::int64_t> folded_inputs;  // the inputs its regions hold folded in (a backend's weights)
  std::string out_spec;                     // the Python package's output structure (a pytree spec), opaque here
  StoredChoice choice;                      // opara/choice.json, where a load kept one
};

// The package's description. Throws opara::Error naming the file and the part that is wrong for a
// file that is not a package, or a damaged one.
OPARA_API PackageInfo read_package_info(const std::string& path);

// The compiled model of a package: its program planned as the package says, each region a node
// running AOTInductor's compiled code (torch::inductor::AOTIModelPackageLoader), on the plan's
// streams (captured into the CUDA graph on a GPU, run by the workers on the CPU), compiled for
// the example inputs the package holds. `options` replace the package's where given (the keys
// of options_from_text; "device" cannot change). A schedule the package keeps (StoredChoice)
// measured on this machine is compiled untimed, unless `options` change how the schedule is
// chosen (stored_choice_misfit). Refused, naming what differs and how to rebuild:
// a package made by another opara or torch release, for another device kind, capability or CPU
// vector ISA; a missing or damaged part is named.
OPARA_API CompiledModel load_package(const std::string& path, const std::map<std::string, std::string>& options = {});

// The same, compiled for `inputs` (the tensors read where they are, static_inputs), which must
// have the package's input signature: a compile cache entry holds no example inputs of its own.
// Another count, dtype or sizes is refused naming the input. The model's messages name it by the
// package's model name (PackageInfo::name), as the caller compiled it.
OPARA_API CompiledModel load_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                                     const std::map<std::string, std::string>& options = {});

// The example inputs the package was made with (what load_package compiles for).
OPARA_API std::vector<at::Tensor> package_example_inputs(const std::string& path);

// The machine a measured schedule holds on: the usable CPUs on the CPU ("16 CPUs"), the GPU's name
// and multiprocessors on CUDA ("NVIDIA H100 80GB HBM3, 132 SMs": a MIG slice has fewer).
OPARA_API std::string schedule_machine(const c10::Device& device);

// The StoredChoice of what `model`'s compile measured, as opara/choice.json holds it (JSON), for
// the package it was loaded from; empty when compile timed nothing (a fixed or stored schedule, a
// single stream).
OPARA_API std::string schedule_choice_record(const CompiledModel& model);

}  // namespace opara
