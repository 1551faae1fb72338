#include "runtime/cuda/host_results.h"

#include <ATen/ATen.h>

#include <exception>
#include <optional>
#include <vector>

#include "exec/node_op.h"

namespace opara {
namespace {

// The elements of a list or a tuple, or nothing for another value.
std::optional<std::vector<c10::IValue>> elements_of(const c10::IValue& value) {
  if (value.isList()) return value.toListRef().vec();
  if (value.isTuple()) return value.toTupleRef().elements().vec();
  return std::nullopt;
}

}  // namespace

bool result_fits(const c10::IValue& captured, const c10::IValue& fresh, bool read_by_a_graph) {
  if (captured.isTensor() && fresh.isTensor()) {
    const at::Tensor& slot = captured.toTensor();
    const at::Tensor& value = fresh.toTensor();
    if (!slot.defined() || !value.defined()) return slot.defined() == value.defined();
    if (slot.sizes() != value.sizes() || slot.scalar_type() != value.scalar_type()) return false;
    // A CPU tensor a graph reads (a 0-dim scalar from aten::NumToTensor) was read on the host while
    // capturing, its value baked in: another value needs another graph.
    return !read_by_a_graph || !slot.is_cpu() || at::equal(slot, value.cpu());
  }
  if (captured.isTensor() || fresh.isTensor()) return false;
  const auto captured_elements = elements_of(captured);
  const auto fresh_elements = elements_of(fresh);
  if (captured_elements || fresh_elements) {
    if (!captured_elements || !fresh_elements || captured.isList() != fresh.isList() ||
        captured_elements->size() != fresh_elements->size()) {
      return false;
    }
    for (std::size_t i = 0; i < captured_elements->size(); ++i) {
      if (!result_fits((*captured_elements)[i], (*fresh_elements)[i], read_by_a_graph)) return false;
    }
    return true;
  }
  try {
    return captured == fresh;
  } catch (const std::exception&) {
    return false;  // values without a defined equality: take the safe road
  }
}

void copy_into_slot(const c10::IValue& slot, const c10::IValue& result) {
  if (slot.isTensor()) {
    if (slot.toTensor().defined()) slot.toTensor().copy_(result.toTensor(), /*non_blocking=*/true);
    return;
  }
  const auto slot_elements = elements_of(slot);
  const auto result_elements = elements_of(result);
  if (!slot_elements || !result_elements) return;
  for (std::size_t i = 0; i < slot_elements->size(); ++i) copy_into_slot((*slot_elements)[i], (*result_elements)[i]);
}

c10::IValue clone_tensors(const c10::IValue& value) {
  return map_leaves(value, [](const c10::IValue& leaf) {
    return leaf.isTensor() && leaf.toTensor().defined() ? leaf.toTensor().clone() : leaf;
  });
}

}  // namespace opara
