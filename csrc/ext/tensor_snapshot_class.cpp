// torch.classes.opara.TensorSnapshot: where some of a call's tensors lived and how often they had
// been written when a graph was compiled for them, checked at every call. The Dynamo backend
// (python/opara/_dynamo.py) checks every weight Dynamo passes before running a graph that reads
// them in place or holds them folded in: hundreds on a CNN, which read one by one from Python cost
// 0.06 ms a call on the diffusers UNet (208 weights), here one call.
#include <fmt/format.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include "opara/error.h"

namespace opara::ext {
namespace {

struct Recorded {
  std::int64_t position = 0;
  const void* data = nullptr;
  std::vector<std::int64_t> strides;
};

const at::Tensor& tensor_at(const std::vector<at::Tensor>& tensors, std::int64_t position) {
  if (position < 0 || position >= static_cast<std::int64_t>(tensors.size())) {
    throw Error(
        fmt::format("TensorSnapshot: position {} is not among the call's {} tensors", position, tensors.size()));
  }
  return tensors[static_cast<std::size_t>(position)];
}

class TensorSnapshot : public torch::CustomClassHolder {
 public:
  // The memory and strides of the tensors at `placed`, the version counters of those at
  // `versioned` (tensors with one: not inference tensors).
  TensorSnapshot(const std::vector<at::Tensor>& tensors, const std::vector<std::int64_t>& placed,
                 const std::vector<std::int64_t>& versioned) {
    for (std::int64_t position : placed) {
      const at::Tensor& tensor = tensor_at(tensors, position);
      placed_.push_back(Recorded{position, tensor.data_ptr(), tensor.strides().vec()});
    }
    for (std::int64_t position : versioned) {
      versions_.emplace_back(position, tensor_at(tensors, position)._version());
    }
  }

  // kWritten when a versioned tensor was written in place since, else kMoved when a placed tensor
  // has other memory or strides (or the call has too few tensors), else kSame.
  std::int64_t check(const std::vector<at::Tensor>& tensors) const {
    const auto count = static_cast<std::int64_t>(tensors.size());
    for (const auto& [position, version] : versions_) {
      if (position >= count) return kMoved;
      if (tensors[static_cast<std::size_t>(position)]._version() != version) return kWritten;
    }
    for (const Recorded& recorded : placed_) {
      if (recorded.position >= count) return kMoved;
      const at::Tensor& tensor = tensors[static_cast<std::size_t>(recorded.position)];
      if (tensor.data_ptr() != recorded.data || tensor.strides() != at::IntArrayRef(recorded.strides)) return kMoved;
    }
    return kSame;
  }

  static constexpr std::int64_t kSame = 0;
  static constexpr std::int64_t kMoved = 1;
  static constexpr std::int64_t kWritten = 2;

 private:
  std::vector<Recorded> placed_;
  std::vector<std::pair<std::int64_t, std::int64_t>> versions_;
};

}  // namespace

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.class_<TensorSnapshot>("TensorSnapshot")
      .def(torch::init<std::vector<at::Tensor>, std::vector<std::int64_t>, std::vector<std::int64_t>>(),
           "Records the memory and strides of the tensors at `placed` and the version counters of those at "
           "`versioned`",
           {torch::arg("tensors"), torch::arg("placed"), torch::arg("versioned")})
      .def("check", &TensorSnapshot::check,
           "0: as recorded; 1: a placed tensor has other memory or strides; 2: a versioned tensor was written "
           "in place since");
}

}  // namespace opara::ext
