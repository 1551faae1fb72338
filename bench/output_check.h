#pragma once

#include <ATen/core/Tensor.h>

#include <vector>

#include "mode_result.h"

namespace opara::bench {

// A mode's outputs against the run's reference, on either device: the largest absolute
// difference, the largest difference over the reference's largest magnitude, and whether they are
// equal bit for bit. Another count or shape of outputs throws opara::Error.
OutputsCheck compare_outputs(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& reference);

}  // namespace opara::bench
