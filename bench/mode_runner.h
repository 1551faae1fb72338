#pragma once

// One run of a mode on given inputs, as both devices' measuring calls it: eager node by node, or a
// compiled model's run().

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "exec/state_buffers.h"
#include "opara/compiled_model.h"

namespace opara::bench {

using Runner = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

// Node by node, the model's state buffers fed after the caller's inputs as a CompiledModel feeds
// them: `state` is the mode's own (initial_state), written by its runs.
inline Runner eager_runner(std::shared_ptr<EagerExecutor> eager, std::vector<at::Tensor> state) {
  return [eager = std::move(eager), state = std::move(state)](const std::vector<at::Tensor>& inputs) {
    std::vector<c10::IValue> arguments(inputs.begin(), inputs.end());
    arguments.insert(arguments.end(), state.begin(), state.end());
    return flatten_tensors(eager->run(arguments));
  };
}

inline Runner compiled_runner(const CompiledModel& model) {
  return [model](const std::vector<at::Tensor>& inputs) { return model.run(inputs); };
}

}  // namespace opara::bench
