#pragma once

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>
#include <vector>

#include "opara/compiled_regions.h"
#include "opara/error.h"
#include "opara/load.h"

namespace opara::ext {

// The bytes of a model archive Python holds in memory: a 1-d uint8 CPU tensor (torch.frombuffer
// over what torch.export.save or torch.jit.save wrote to a buffer). `name` stands for the file.
inline std::string archive_bytes(const at::Tensor& archive, const std::string& name) {
  if (!archive.defined() || archive.scalar_type() != at::kByte || archive.dim() != 1 || !archive.is_cpu()) {
    throw Error(fmt::format(
        "{}: the archive must be a 1-d uint8 CPU tensor of the bytes torch.export.save or torch.jit.save wrote", name));
  }
  const at::Tensor bytes = archive.contiguous();
  return {reinterpret_cast<const char*>(bytes.data_ptr<std::uint8_t>()), static_cast<std::size_t>(bytes.numel())};
}

// The graph of an archive held in memory, with its regions compiled by Inductor as nodes where
// `regions` (the lowering's description; empty: none) says so (with_compiled_regions).
inline Graph archive_graph(const at::Tensor& archive, const std::string& name, const std::string& regions,
                           const std::vector<at::Tensor>& region_constants) {
  Graph graph = load_archive(archive_bytes(archive, name), name);
  return regions.empty() ? graph : with_compiled_regions(graph, regions, region_constants);
}

}  // namespace opara::ext
