#include "exec/outputs.h"

#include <ATen/ATen.h>
#include <fmt/format.h>

#include "opara/error.h"

namespace opara {
namespace {

void collect(const c10::IValue& value, std::vector<at::Tensor>& tensors) {
  if (value.isTensor()) {
    tensors.push_back(value.toTensor());
  } else if (value.isTuple()) {
    for (const auto& element : value.toTupleRef().elements()) collect(element, tensors);
  } else if (value.isList()) {
    for (const auto& element : value.toListRef()) collect(element, tensors);
  } else if (value.isGenericDict()) {
    for (const auto& entry : value.toGenericDict()) collect(entry.value(), tensors);
  }
}

void check_pairs(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  if (actual.size() != expected.size()) {
    throw Error(fmt::format("{} output tensors, the reference has {}", actual.size(), expected.size()));
  }
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].sizes() != expected[i].sizes() || actual[i].scalar_type() != expected[i].scalar_type()) {
      throw Error(fmt::format("output {} is {} {}, the reference is {} {}", i, c10::toString(actual[i].scalar_type()),
                              c10::str(actual[i].sizes()), c10::toString(expected[i].scalar_type()),
                              c10::str(expected[i].sizes())));
    }
  }
}

}  // namespace

std::vector<at::Tensor> flatten_tensors(const std::vector<c10::IValue>& values) {
  std::vector<at::Tensor> tensors;
  for (const auto& value : values) collect(value, tensors);
  return tensors;
}

double max_abs_difference(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  check_pairs(actual, expected);
  double worst = 0;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].numel() == 0) continue;
    const auto a = actual[i].to(at::kCPU, at::kDouble);
    const auto b = expected[i].to(at::kCPU, at::kDouble);
    worst = std::max(worst, (a - b).abs().max().item<double>());
  }
  return worst;
}

bool bitwise_equal(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  if (actual.size() != expected.size()) return false;
  for (std::size_t i = 0; i < actual.size(); ++i) {
    if (actual[i].sizes() != expected[i].sizes() || actual[i].scalar_type() != expected[i].scalar_type()) return false;
    const auto a = actual[i].to(at::kCPU).contiguous().reshape({-1}).view(at::kByte);
    const auto b = expected[i].to(at::kCPU).contiguous().reshape({-1}).view(at::kByte);
    if (!at::equal(a, b)) return false;
  }
  return true;
}

}  // namespace opara
