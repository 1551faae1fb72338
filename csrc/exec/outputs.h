#pragma once

#include <ATen/core/ivalue.h>

#include <vector>

namespace opara {

// Every tensor inside the values (tuples, lists and dict values included), in order.
std::vector<at::Tensor> flatten_tensors(const std::vector<c10::IValue>& values);

// Largest absolute element difference over tensor pairs (compared on the CPU, as double).
// Throws opara::Error when the counts, shapes or dtypes differ: a wrong structure is no number.
double max_abs_difference(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected);

// True when each pair has the same shape, dtype and bytes: the reference check on the CPU.
bool bitwise_equal(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected);

}  // namespace opara
