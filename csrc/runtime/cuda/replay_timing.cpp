#include "runtime/cuda/replay_timing.h"

#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAStream.h>

namespace opara {

std::vector<double> time_replays(CudaModel& model, const std::vector<at::Tensor>& inputs,
                                 const std::function<void()>& before_each, int runs) {
  std::vector<double> samples;
  model.run_in_turn([&] {
    const c10::cuda::CUDAStream stream = c10::cuda::getCurrentCUDAStream();
    for (int i = 0; i < runs; ++i) {
      if (before_each) before_each();
      at::cuda::CUDAEvent start(cudaEventDefault);
      at::cuda::CUDAEvent end(cudaEventDefault);
      start.record(stream);
      model.run(inputs, /*clone_outputs=*/false);
      end.record(stream);
      end.synchronize();
      samples.push_back(static_cast<double>(start.elapsed_time(end)));
    }
  });
  return samples;
}

}  // namespace opara
