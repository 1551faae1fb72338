#include "output_check.h"

#include <ATen/ATen.h>

#include <algorithm>

#include "exec/outputs.h"

namespace opara::bench {
namespace {

// The largest difference over the largest magnitude of the reference, output by output: an
// element-wise ratio would blow a 1e-7 difference at an exact zero (a ReLU's) up to 1e5.
double max_relative_difference(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& expected) {
  double worst = 0;
  for (std::size_t i = 0; i < actual.size() && i < expected.size(); ++i) {
    if (actual[i].numel() == 0 || expected[i].numel() == 0) continue;
    const at::Tensor a = actual[i].to(at::kDouble).cpu();
    const at::Tensor e = expected[i].to(at::kDouble).cpu();
    const double scale = std::max(e.abs().max().item<double>(), 1e-12);
    worst = std::max(worst, (a - e).abs().max().item<double>() / scale);
  }
  return worst;
}

}  // namespace

OutputsCheck compare_outputs(const std::vector<at::Tensor>& actual, const std::vector<at::Tensor>& reference) {
  OutputsCheck check;
  check.max_abs_diff = max_abs_difference(actual, reference);  // first: it names another count or shape
  check.max_rel_diff = max_relative_difference(actual, reference);
  check.bitwise_equal = bitwise_equal(actual, reference);
  return check;
}

}  // namespace opara::bench
