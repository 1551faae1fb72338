// A graph captured with cuBLAS keeps the workspaces it was captured with when LibTorch clears its
// own (at::cuda::clearCublasWorkspaces, which Inductor's CUDA-graph trees call around every
// recording): the pool holds them and LibTorch's maps no longer do, so memory handed out after the
// clear on the capture streams is not written by a replay, and a second graph in the pool uses the
// same workspaces rather than new ones. Skipped without a GPU.
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <ATen/cuda/CUDAContextLight.h>
#include <c10/cuda/CUDAGuard.h>

#include <algorithm>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <tuple>
#include <vector>

#include "model_files.h"
#include "opara/load.h"
#include "opara/plan.h"
#include "runtime/cuda/capture_pool.h"
#include "runtime/cuda/cuda_graph_executor.h"

namespace opara {
namespace {

// Two matmuls on branches of their own (two streams), and an addmm (cuBLASLt) joining them.
constexpr const char* kMatmuls = R"(
def forward(self, x, w):
    a = torch.mm(x, w)
    b = torch.mm(torch.relu(x), w)
    return torch.addmm(a, b, w)
)";

// How many entries LibTorch's cuBLAS and cuBLASLt maps hold for `streams`.
std::size_t workspaces_in_libtorch(const std::vector<c10::cuda::CUDAStream>& streams) {
  std::size_t count = 0;
  for (at::cuda::WorkspaceMapWithMutex* map :
       {&at::cuda::cublas_handle_stream_to_workspace(), &at::cuda::cublaslt_handle_stream_to_workspace()}) {
    const std::shared_lock<std::shared_mutex> lock(map->mutex);
    for (const auto& [key, workspace] : map->map) {
      const auto* stream = static_cast<cudaStream_t>(std::get<1>(key));
      count += std::any_of(streams.begin(), streams.end(), [&](const auto& s) { return s.stream() == stream; });
    }
  }
  return count;
}

TEST(BlasWorkspacesCuda, AGraphKeepsTheWorkspacesItWasCapturedWithWhenLibTorchClearsItsOwn) {
  OPARA_REQUIRE_GPU();
  const Graph graph = load(testing::saved_module("matmuls", kMatmuls));
  const at::Tensor x = at::randn({512, 512}, at::kCUDA);
  const at::Tensor w = at::randn({512, 512}, at::kCUDA) / 16;
  const std::shared_ptr<CapturePool> pool = CapturePool::create(0);
  const Plan plan = make_plan(graph, PlanOptions{}, {});
  CudaGraphExecutor first(graph, plan, {x, w}, CudaGraphOptions{MemoryProtection::kRecordStream, 2, pool});
  const std::vector<c10::cuda::CUDAStream> streams = pool->capture_streams(plan.stream_count);
  const std::size_t held = pool->workspaces_held();
  EXPECT_GT(held, 0u) << "the pool holds no cuBLAS workspace";
  EXPECT_EQ(workspaces_in_libtorch(streams), 0u) << "LibTorch still holds a workspace a graph was captured with";
  CudaGraphExecutor second(graph, plan, {x, w}, CudaGraphOptions{MemoryProtection::kRecordStream, 2, pool});
  EXPECT_EQ(pool->workspaces_held(), held) << "the second graph was captured with workspaces of its own";

  at::cuda::clearCublasWorkspaces();
  // Memory for others on the capture streams, where a freed workspace would be handed out first.
  std::vector<at::Tensor> fillers;
  const std::size_t largest = std::max<std::size_t>(at::cuda::getChosenWorkspaceSize(), 1 << 20);
  for (const c10::cuda::CUDAStream& stream : streams) {
    const c10::cuda::CUDAStreamGuard guard(stream);
    for (std::size_t bytes = 512; bytes <= largest; bytes *= 2) {
      fillers.push_back(at::full({static_cast<int64_t>(bytes / 4)}, 7.0, at::kCUDA));
    }
    stream.synchronize();
  }
  const at::Tensor expected = at::addmm(at::mm(x, w), at::mm(at::relu(x), w), w);
  for (CudaGraphExecutor* executor : {&first, &second}) {
    executor->replay();
    c10::cuda::getCurrentCUDAStream().synchronize();
    EXPECT_TRUE(at::allclose(executor->static_outputs().at(0).toTensor(), expected, 1e-3, 1e-3));
  }
  for (const at::Tensor& filler : fillers) {
    EXPECT_TRUE(at::all(filler == 7.0).item<bool>()) << "a replay wrote " << filler.nbytes() << " bytes of another's";
  }
}

}  // namespace
}  // namespace opara
