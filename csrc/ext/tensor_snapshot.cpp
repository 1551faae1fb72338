#include "ext/tensor_snapshot.h"

#include <fmt/format.h>

#include "opara/error.h"

namespace opara::ext {
namespace {

const at::Tensor& tensor_at(const std::vector<at::Tensor>& tensors, std::int64_t position) {
  if (position < 0 || position >= static_cast<std::int64_t>(tensors.size())) {
    throw Error(
        fmt::format("TensorSnapshot: position {} is not among the call's {} tensors", position, tensors.size()));
  }
  return tensors[static_cast<std::size_t>(position)];
}

}  // namespace

TensorSnapshot::TensorSnapshot(const std::vector<at::Tensor>& tensors, const std::vector<std::int64_t>& placed,
                               const std::vector<std::int64_t>& versioned) {
  for (std::int64_t position : placed) {
    const at::Tensor& tensor = tensor_at(tensors, position);
    placed_.push_back(Recorded{position, tensor.data_ptr(), tensor.strides().vec()});
  }
  for (std::int64_t position : versioned) {
    versions_.emplace_back(position, tensor_at(tensors, position)._version());
  }
}

TensorSnapshot::Found TensorSnapshot::check(const std::vector<at::Tensor>& tensors) const {
  const auto count = static_cast<std::int64_t>(tensors.size());
  for (const auto& [position, version] : versions_) {
    if (position >= count) return Found::kMoved;
    if (tensors[static_cast<std::size_t>(position)]._version() != version) return Found::kWritten;
  }
  for (const Recorded& recorded : placed_) {
    if (recorded.position >= count) return Found::kMoved;
    const at::Tensor& tensor = tensors[static_cast<std::size_t>(recorded.position)];
    if (tensor.data_ptr() != recorded.data || tensor.strides() != at::IntArrayRef(recorded.strides)) {
      return Found::kMoved;
    }
  }
  return Found::kSame;
}

}  // namespace opara::ext
