#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "opara/graph.h"

namespace opara {

// What a compiled model or a graph set accepts: the example inputs' count, and each one's shape,
// dtype and device. Nothing is reshaped, cast or moved silently: a mismatch is an error naming
// the input.
class InputSignature {
 public:
  // `static_inputs`: the indices of inputs that must be the example tensors themselves (their
  // storage, offset and strides), as Options::static_inputs says. `batched` (a graph set's, by
  // input): inputs whose first dimension is any number of rows, the same for all of them.
  InputSignature(const Graph& graph, const std::vector<at::Tensor>& examples,
                 const std::vector<int>& static_inputs = {}, std::vector<bool> batched = {});

  // Throws opara::Error naming the model file, the input and the expected value. Returns the rows
  // of the batched inputs (0 when none is).
  std::int64_t check(const std::vector<at::Tensor>& inputs) const;

  // For static input `index`, which the model writes (state: a KV cache), given as another tensor
  // of the same shape, strides, dtype and device: when nothing but the model holds the memory it
  // was compiled on any more (the caller dropped the old cache, as transformers' generate() does
  // per request), the values move into that memory and `input` is made to share it
  // (Tensor::set_), so the graphs read and write the caller's tensor where they always did. True
  // when `input` is (now) the bound tensor; false, changing nothing, otherwise. On a device, the
  // copy goes on the current stream: the caller orders it after the model's last run.
  bool adopt(std::size_t index, const at::Tensor& input) const;

  [[nodiscard]] std::size_t size() const { return names_.size(); }
  [[nodiscard]] std::string describe() const;  // "x: float32[1, 3, 224, 224] on cuda:0, ..."

 private:
  // "[1, 3, 8, 8]", or for a batched input "[*, 3, 8, 8]".
  [[nodiscard]] std::string expected_shape(std::size_t index) const;
  [[nodiscard]] bool fits_shape(std::size_t index, const at::Tensor& input) const;

  std::string source_path_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<c10::ScalarType> dtypes_;
  std::vector<c10::Device> devices_;
  std::vector<at::Tensor> bound_;  // by input: the example a static input must be, else undefined
  std::vector<bool> batched_;      // by input; empty for a compiled model
};

}  // namespace opara
