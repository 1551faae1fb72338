#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/core/ivalue.h>

#include <cstddef>
#include <utility>
#include <vector>

#include "exec/outputs.h"

namespace opara {

// Copies of the tensors a run is about to write in place, put back by undo(). The runs a compile
// makes for itself (warm-up, capture, a reference run) are not the model's: a model that writes
// its inputs must see them as one real run leaves them, not warm-ups later.
class UndoWrites {
 public:
  // `written[i]`: the run writes into values[i] (a tensor, or the tensors of a list or tuple).
  UndoWrites(const std::vector<c10::IValue>& values, const std::vector<bool>& written) {
    for (std::size_t i = 0; i < values.size() && i < written.size(); ++i) {
      if (!written[i]) continue;
      for (const at::Tensor& tensor : flatten_tensors({values[i]})) saved_.emplace_back(tensor, tensor.clone());
    }
  }

  // On the current stream, after the runs queued there (or synchronised) before it.
  void undo() const {
    for (const auto& [tensor, copy] : saved_) tensor.copy_(copy);
  }

 private:
  std::vector<std::pair<at::Tensor, at::Tensor>> saved_;
};

}  // namespace opara
