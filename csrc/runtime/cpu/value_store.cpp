#include "runtime/cpu/value_store.h"

#include <algorithm>
#include <utility>

namespace opara {

ValueStore::ValueStore(const Graph& graph)
    : graph_(graph),
      reader_count_(graph.values().size()),
      held_whole_run_(graph.values().size(), 0),
      readers_left_(std::make_unique<std::atomic<std::size_t>[]>(graph.values().size())) {
  for (const Value& value : graph.values()) reader_count_[value.id] = value.users.size();
  for (ValueId input : graph.inputs()) held_whole_run_[input] = 1;
  for (ValueId output : graph.outputs()) held_whole_run_[output] = 1;
}

void ValueStore::start_run(const std::vector<c10::IValue>& inputs) {
  slots_.assign(graph_.values().size(), c10::IValue());
  for (std::size_t id = 0; id < reader_count_.size(); ++id)
    readers_left_[id].store(reader_count_[id], std::memory_order_relaxed);
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const ValueId id = graph_.inputs()[i];
    // A dispatcher call per input even when it is on the CPU already: the backend passes every
    // weight of the model (googlenet's 288) at each call.
    const bool elsewhere = inputs[i].isTensor() && !inputs[i].toTensor().device().is_cpu();
    slots_[id] = elsewhere ? c10::IValue(inputs[i].toTensor().to(c10::kCPU)) : inputs[i];
  }
}

void ValueStore::publish(const Node& node, std::vector<c10::IValue>& stack) {
  for (std::size_t i = 0; i < node.outputs.size(); ++i) {
    const ValueId output = node.outputs[i];
    if (reader_count_[output] > 0 || held_whole_run_[output]) slots_[output] = std::move(stack[i]);
  }
  stack.clear();
  for (std::size_t k = 0; k < node.inputs.size(); ++k) {
    const ValueId input = node.inputs[k];
    // Value::users lists a node once even when it reads the value twice.
    if (std::find(node.inputs.begin(), node.inputs.begin() + k, input) != node.inputs.begin() + k) continue;
    if (readers_left_[input].fetch_sub(1, std::memory_order_acq_rel) == 1 && !held_whole_run_[input])
      slots_[input] = c10::IValue();
  }
}

std::vector<c10::IValue> ValueStore::take_outputs() {
  std::vector<c10::IValue> outputs;
  outputs.reserve(graph_.outputs().size());
  for (ValueId output : graph_.outputs()) outputs.push_back(slots_[output]);
  slots_.clear();
  return outputs;
}

}  // namespace opara
