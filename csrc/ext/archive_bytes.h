#pragma once

#include <ATen/core/Tensor.h>
#include <fmt/format.h>

#include <cstdint>
#include <string>

#include "opara/error.h"

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

}  // namespace opara::ext
