// The one rule for where a model compiles and plans (compile(), graph sets, the plan op): the
// option, else the CUDA examples, else the others; a CUDA device always with its index; a clear
// error for a device opara does not run on and for CUDA where no GPU is. GPU twins skip without one.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <c10/cuda/CUDAFunctions.h>

#include "model_files.h"
#include "opara/error.h"
#include "opara/options.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

Options on(c10::Device device) {
  Options options;
  options.device = device;
  return options;
}

TEST(ModelDevice, TheCpuExamplesOrTheOptionSayTheCpu) {
  EXPECT_EQ(model_device({}, {at::ones({2})}, "m.pt2"), c10::Device(c10::kCPU));
  EXPECT_EQ(model_device({}, {}, "m.pt2"), c10::Device(c10::kCPU));
  EXPECT_EQ(model_device(on(c10::kCPU), {at::ones({2})}, "m.pt2"), c10::Device(c10::kCPU));
}

TEST(ModelDevice, ADeviceOparaDoesNotRunOnIsNamed) {
  try {
    (void)model_device(on(c10::Device(c10::kMeta)), {}, "m.pt2");
    ADD_FAILURE() << "meta was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("m.pt2"));
    EXPECT_THAT(error.what(), HasSubstr("not on meta"));
  }
}

TEST(ModelDevice, CudaWithoutAGpuSaysToCompileForTheCpu) {
  if (c10::cuda::device_count() > 0) GTEST_SKIP() << "a GPU is visible here";
  for (const c10::Device device : {c10::Device(c10::kCUDA), c10::Device(c10::kCUDA, 0)}) {
    try {
      (void)model_device(on(device), {at::ones({2})}, "m.pt2");
      ADD_FAILURE() << device << " was accepted";
    } catch (const Error& error) {
      EXPECT_THAT(error.what(), HasSubstr("m.pt2"));
      EXPECT_THAT(error.what(), HasSubstr("needs a CUDA GPU"));
    }
  }
}

TEST(ModelDevice, OnTheGpuCudaWithoutAnIndexIsTheCurrentDevice) {
  OPARA_REQUIRE_GPU();
  const c10::Device device = model_device(on(c10::Device(c10::kCUDA)), {}, "m.pt2");
  EXPECT_TRUE(device.has_index());
  EXPECT_EQ(device.index(), c10::cuda::current_device());
  // A CPU scalar first (a Python float under torch.compile), then the CUDA examples.
  EXPECT_EQ(model_device({}, {at::scalar_tensor(2.0), at::ones({2}, at::kCUDA)}, "m.pt2"), c10::Device(c10::kCUDA, 0));
  try {
    (void)model_device(on(c10::Device(c10::kCUDA, c10::cuda::device_count())), {}, "m.pt2");
    ADD_FAILURE() << "a device past the last one was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("is not a device here"));
  }
}

}  // namespace
}  // namespace opara
