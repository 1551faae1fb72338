#pragma once

// One run of a mode on given inputs, as both devices' measuring calls it: eager node by node, or a
// compiled model's run().

#include <ATen/core/Tensor.h>

#include <functional>
#include <memory>
#include <vector>

#include "exec/eager_executor.h"
#include "exec/outputs.h"
#include "opara/compiled_model.h"

namespace opara::bench {

using Runner = std::function<std::vector<at::Tensor>(const std::vector<at::Tensor>&)>;

inline Runner eager_runner(std::shared_ptr<EagerExecutor> eager) {
  return [eager = std::move(eager)](const std::vector<at::Tensor>& inputs) {
    return flatten_tensors(eager->run(std::vector<c10::IValue>(inputs.begin(), inputs.end())));
  };
}

inline Runner compiled_runner(const CompiledModel& model) {
  return [model](const std::vector<at::Tensor>& inputs) { return model.run(inputs); };
}

}  // namespace opara::bench
