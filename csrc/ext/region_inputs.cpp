// torch.ops.opara.register_region_inputs / region_inputs / region_input_copies: see region_inputs.h.
#include "ext/region_inputs.h"

#include <ATen/ATen.h>
#include <ATen/MemoryOverlap.h>
#include <fmt/format.h>
#include <fmt/ranges.h>
#include <torch/library.h>

#include <atomic>
#include <memory>

#include "ext/keyed_registry.h"
#include "opara/error.h"

namespace opara::ext {
namespace {

// Inductor assumes this alignment of every input whose example had it (torch/_inductor/utils.py,
// ALIGNMENT): its GPU kernels load vectors at that width.
constexpr std::uintptr_t kAlignment = 16;

bool aligned(const at::Tensor& tensor) {
  return reinterpret_cast<std::uintptr_t>(tensor.data_ptr()) % kAlignment == 0;
}

// What a region's kernels assume of one input.
struct InputLayout {
  std::vector<std::int64_t> sizes;
  std::vector<std::int64_t> strides;
  bool aligned = true;

  explicit InputLayout(const at::Tensor& example)
      : sizes(example.sizes().vec()),
        strides(example.strides().vec()),
        aligned(!example.defined() || example.numel() == 0 || ext::aligned(example)) {}

  // Whether `tensor` reads as its example did: the same strides along every dimension of more
  // than one element (the others are never stepped along), and aligned where the example was.
  [[nodiscard]] bool fits(const at::Tensor& tensor) const {
    if (!tensor.defined() || tensor.numel() == 0) return true;
    for (std::size_t d = 0; d < sizes.size(); ++d) {
      if (tensor.size(static_cast<std::int64_t>(d)) > 1 && tensor.stride(static_cast<std::int64_t>(d)) != strides[d])
        return false;
    }
    return !aligned || ext::aligned(tensor);
  }

  // `tensor` copied into the example's layout (a fresh allocation is aligned).
  [[nodiscard]] at::Tensor copy(const at::Tensor& tensor) const {
    return at::empty_strided(tensor.sizes(), strides, tensor.options()).copy_(tensor);
  }
};

struct RegionLayouts {
  std::vector<InputLayout> inputs;
  std::atomic<std::int64_t> copies{0};
};

// By the key Python gives each region (opara/_regions.py).
KeyedRegistry<RegionLayouts>& registry() {
  static KeyedRegistry<RegionLayouts> regions;
  return regions;
}

// Whether a copy can give a tensor `example`'s layout: not where its memory overlaps (an expanded
// tensor: stride 0 along a dimension of more than one element).
bool copy_can_reach(const at::Tensor& example) {
  return !example.defined() || at::has_internal_overlap(example) != at::MemOverlap::Yes;
}

// What a region is compiled from for the value `value`: the value, or a contiguous copy of one
// whose layout no copy can reach (opara/_regions.py asks before it compiles).
at::Tensor region_example(const at::Tensor& value) {
  return copy_can_reach(value) ? value : value.contiguous();
}

void register_region_inputs(std::int64_t key, const std::vector<at::Tensor>& examples) {
  auto layouts = std::make_shared<RegionLayouts>();
  for (std::size_t i = 0; i < examples.size(); ++i) {
    if (!copy_can_reach(examples[i])) {
      throw Error(
          fmt::format("opara: region {}: example input {} overlaps itself (strides {}); compile regions "
                      "from opara::region_example's examples",
                      key, i, fmt::join(examples[i].strides(), ", ")));
    }
    layouts->inputs.emplace_back(examples[i]);
  }
  registry().add(key, std::move(layouts));
}

void unregister_region_inputs(std::int64_t key) {
  registry().remove(key);
}

std::int64_t region_input_copies(const std::vector<std::int64_t>& keys) {
  std::int64_t copies = 0;
  for (std::int64_t key : keys) {
    if (const auto layouts = registry().find(key)) copies += layouts->copies.load();
  }
  return copies;
}

}  // namespace

std::vector<at::Tensor> region_inputs(std::int64_t key, const std::vector<at::Tensor>& inputs) {
  const auto layouts = registry().find(key);
  if (!layouts) return inputs;
  if (inputs.size() != layouts->inputs.size()) {
    throw Error(
        fmt::format("opara: region {} was compiled for {} inputs, not {}", key, layouts->inputs.size(), inputs.size()));
  }
  std::vector<at::Tensor> conformed = inputs;
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const InputLayout& layout = layouts->inputs[i];
    if (inputs[i].defined() && inputs[i].sizes() != at::IntArrayRef(layout.sizes)) {
      throw Error(fmt::format("opara: region {} was compiled for input {} of shape [{}], not [{}]", key, i,
                              fmt::join(layout.sizes, ", "), fmt::join(inputs[i].sizes(), ", ")));
    }
    if (layout.fits(inputs[i])) continue;
    conformed[i] = layout.copy(inputs[i]);
    layouts->copies.fetch_add(1, std::memory_order_relaxed);
  }
  return conformed;
}

TORCH_LIBRARY_FRAGMENT(opara, m) {
  m.def("region_example(Tensor value) -> Tensor", &region_example);
  m.def("register_region_inputs(int key, Tensor[] examples) -> ()", &register_region_inputs);
  m.def("unregister_region_inputs(int key) -> ()", &unregister_region_inputs);
  m.def("region_inputs(int key, Tensor[] inputs) -> Tensor[]", &region_inputs);
  m.def("region_input_copies(int[] keys) -> int", &region_input_copies);
}

}  // namespace opara::ext
