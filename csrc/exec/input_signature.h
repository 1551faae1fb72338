#pragma once

#include <ATen/core/Tensor.h>

#include <string>
#include <vector>

#include "opara/graph.h"

namespace opara {

// What a compiled model accepts: the example inputs' count, and each one's shape, dtype and
// device. Nothing is reshaped, cast or moved silently: a mismatch is an error naming the input.
class InputSignature {
 public:
  // `static_inputs`: the indices of inputs that must be the example tensors themselves (their
  // storage, offset and strides), as Options::static_inputs says.
  InputSignature(const Graph& graph, const std::vector<at::Tensor>& examples,
                 const std::vector<int>& static_inputs = {});

  // Throws opara::Error naming the model file, the input and the expected value.
  void check(const std::vector<at::Tensor>& inputs) const;

  // For static input `index`, which the model writes (state: a KV cache), given as another tensor
  // of the same shape, strides, dtype and device: when nothing but the model holds the memory it
  // was compiled on any more (the caller dropped the old cache, as transformers' generate() does
  // per request), the values move into that memory and `input` is made to share it
  // (Tensor::set_), so the graphs read and write the caller's tensor where they always did. True
  // when `input` is (now) the bound tensor; false, changing nothing, otherwise.
  bool adopt(std::size_t index, const at::Tensor& input) const;

  [[nodiscard]] std::size_t size() const { return names_.size(); }
  [[nodiscard]] std::string describe() const;  // "x: float32[1, 3, 224, 224] on cuda:0, ..."

 private:
  std::string source_path_;
  std::vector<std::string> names_;
  std::vector<std::vector<std::int64_t>> shapes_;
  std::vector<c10::ScalarType> dtypes_;
  std::vector<c10::Device> devices_;
  std::vector<at::Tensor> bound_;  // by input: the example a static input must be, else undefined
};

}  // namespace opara
