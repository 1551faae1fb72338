#pragma once

// The layout each region Inductor compiled expects of its inputs, and the copies that give it that
// layout. Inductor compiles a region for its example inputs' strides, storage offsets' alignment
// and all, and its kernels index memory by them: a call whose input is laid out otherwise (a
// channels_last image, a transposed view, an expanded tensor) would be read as if it had the
// example's strides, and give a wrong answer without a word. Every region, native or Python, is
// registered here with its examples; a call's inputs that differ are copied into the example's
// layout first, and counted (CompiledModel.stats()["region_input_copies"]).

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <vector>

namespace opara::ext {

// `inputs` as region `key` was compiled to read them: each one laid out otherwise replaced by a
// copy in its example's layout. A region never registered gets its inputs as they are.
std::vector<at::Tensor> region_inputs(std::int64_t key, const std::vector<at::Tensor>& inputs);

}  // namespace opara::ext
