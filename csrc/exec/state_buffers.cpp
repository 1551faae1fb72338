#include "exec/state_buffers.h"

#include <fmt/format.h>

#include "exec/own_buffers.h"
#include "opara/error.h"

namespace opara {

std::vector<at::Tensor> initial_state(const Graph& graph, c10::Device device) {
  std::vector<at::Tensor> state;
  for (const StateBuffer& buffer : graph.state()) {
    if (!buffer.initial) {
      throw Error(fmt::format("{}: the state buffer {} has no first value", graph.source_path, buffer.name));
    }
    std::vector<c10::IValue> stack;
    buffer.initial->run(stack);
    if (stack.size() != 1 || !stack.front().isTensor()) {
      throw Error(fmt::format("{}: the state buffer {} is not a tensor", graph.source_path, buffer.name));
    }
    const at::Tensor& first = stack.front().toTensor();
    state.push_back(made_as_own_buffers([&] { return first.to(device, /*non_blocking=*/false, /*copy=*/true); }));
  }
  return state;
}

}  // namespace opara
