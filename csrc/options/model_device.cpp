// model_device (opara/options.h): where a model compiles and plans.
#include <c10/cuda/CUDAFunctions.h>
#include <fmt/format.h>

#include "opara/error.h"
#include "opara/options.h"

namespace opara {
namespace {

c10::Device named_or_example_device(const Options& options, const std::vector<at::Tensor>& examples) {
  if (options.device) return *options.device;
  for (const at::Tensor& example : examples) {
    if (example.defined() && example.is_cuda()) return example.device();
  }
  for (const at::Tensor& example : examples) {
    if (example.defined()) return example.device();
  }
  return c10::kCPU;
}

}  // namespace

c10::Device model_device(const Options& options, const std::vector<at::Tensor>& examples, const std::string& source) {
  c10::Device device = named_or_example_device(options, examples);
  if (!device.is_cpu() && !device.is_cuda()) {
    throw Error(fmt::format("{}: opara runs models on the CPU or a CUDA GPU, not on {}", source, device.str()));
  }
  if (device.is_cpu()) return device;
  const c10::DeviceIndex visible = c10::cuda::device_count();
  if (visible == 0) {
    throw Error(
        fmt::format("{}: compiling for {} needs a CUDA GPU, and none is visible here; compile for the CPU "
                    "(Options::device = cpu) instead",
                    source, device.str()));
  }
  if (!device.has_index()) return {c10::kCUDA, c10::cuda::current_device()};
  if (device.index() >= visible) {
    throw Error(fmt::format("{}: {} is not a device here: {} CUDA device(s) are visible (cuda:0 to cuda:{})", source,
                            device.str(), visible, visible - 1));
  }
  return device;
}

}  // namespace opara
