// TensorSnapshot: where some of a call's tensors lived and how often they had been written when a
// graph was compiled for them. The Dynamo backend's graphs (torch.classes.opara.Model.watch, run
// by run_watched) check every weight Dynamo passes before a run that reads them in place or holds
// them folded in: hundreds on a CNN, which read one by one from Python cost 0.06 ms a call on the
// diffusers UNet (208 weights).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace opara::ext {

class TensorSnapshot {
 public:
  enum class Found : std::int64_t { kSame = 0, kMoved = 1, kWritten = 2 };

  TensorSnapshot() = default;
  // The memory and strides of the tensors at `placed`, the version counters of those at
  // `versioned` (tensors with one: not inference tensors). A position outside `tensors` is refused.
  TensorSnapshot(const std::vector<at::Tensor>& tensors, const std::vector<std::int64_t>& placed,
                 const std::vector<std::int64_t>& versioned);

  // kWritten when a versioned tensor was written in place since, else kMoved when a placed tensor
  // has other memory or strides (or the call has too few tensors), else kSame.
  [[nodiscard]] Found check(const std::vector<at::Tensor>& tensors) const;

 private:
  struct Recorded {
    std::int64_t position = 0;
    const void* data = nullptr;
    std::vector<std::int64_t> strides;
  };
  std::vector<Recorded> placed_;
  std::vector<std::pair<std::int64_t, std::int64_t>> versions_;
};

}  // namespace opara::ext
