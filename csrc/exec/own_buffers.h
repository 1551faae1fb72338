#pragma once

#include <ATen/core/Tensor.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <utility>

namespace opara {

// Runs `make`, which allocates buffers a compiled model keeps and refills in place on every run
// (state buffers, copies of the inputs, host-step slots, pinned staging), as ordinary tensors
// without autograd history, even under torch.inference_mode(): an inference tensor may not be
// written outside inference mode, and a model compiled under it may be run outside it. Only the
// allocation leaves the caller's mode: what the compile runs (warm-ups, captures, writes to the
// caller's state, which may be inference tensors) runs in it.
template <typename Make>
auto made_as_own_buffers(Make&& make) {
  const c10::InferenceMode not_inference(false);
  const c10::AutoGradMode no_grad(false);
  return std::forward<Make>(make)();
}

// A copy of `tensor` the model keeps (see made_as_own_buffers).
inline at::Tensor own_copy(const at::Tensor& tensor) {
  return made_as_own_buffers([&] { return tensor.clone(); });
}

}  // namespace opara
