// A graph set as a service uses it: calls of any batch size give the model's outputs (padded to a
// bucket, cut back; split past the largest bucket), inputs that are not batched pass whole, bad
// requests are refused naming the input and the shape expected, models whose outputs mix rows or
// are not batched are refused at compile time, and threads calling one set at once each get their
// own right answers. On the CPU; the GPU half (a shared pool) skips without a GPU.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fmt/format.h>

#include <atomic>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include "model_files.h"
#include "opara/error.h"
#include "opara/graph_set.h"
#include "opara/load.h"
#include "tools/reference_forward.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

// Rows independent, two branches (two streams), a scale that is not batched.
constexpr const char* kRowwise = R"(
def forward(self, x, scale):
    a = torch.tanh(torch.matmul(x, scale))
    b = torch.sigmoid(x).sum(1, keepdim=True)
    return a * b, x.mean(1)
)";

// A batch statistic: each row's output depends on the others.
constexpr const char* kMixesRows = R"(
def forward(self, x):
    return x - x.mean(0, keepdim=True)
)";

// Each row divided by the number of rows: right for each size alone, wrong once padded.
constexpr const char* kDividesByTheBatch = R"(
def forward(self, x):
    return x / x.size(0)
)";

// One output summed over the batch: not batched.
constexpr const char* kBatchTotal = R"(
def forward(self, x):
    return torch.relu(x), x.sum()
)";

Options cpu_options() {
  Options options;
  options.device = c10::kCPU;
  options.cpu.tuning_ms = 0;
  options.cpu.intra_op_threads = 1;
  return options;
}

GraphSetOptions buckets(std::vector<std::int64_t> sizes) {
  GraphSetOptions options;
  options.batch_sizes = std::move(sizes);
  return options;
}

std::string compile_error(const std::string& path, const std::vector<at::Tensor>& examples,
                          const GraphSetOptions& set_options) {
  try {
    compile_graph_set(path, examples, set_options, cpu_options());
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

void expect_like_the_model(const GraphSet& set, const std::string& path, const at::Tensor& x, const at::Tensor& scale) {
  const std::vector<at::Tensor> outputs = set.run({x, scale});
  const std::vector<at::Tensor> expected = torchscript_forward(path, {x, scale});
  ASSERT_EQ(outputs.size(), expected.size());
  for (std::size_t k = 0; k < outputs.size(); ++k) {
    EXPECT_EQ(outputs[k].sizes(), expected[k].sizes()) << x.size(0) << " rows, output " << k;
    // Padded, a bucket multiplies more rows than eager: BLAS may block it otherwise, in the last bits.
    EXPECT_TRUE(at::allclose(outputs[k], expected[k], 1e-4, 1e-5)) << x.size(0) << " rows, output " << k;
  }
}

TEST(GraphSet, EveryBatchSizeGivesTheModelsOutputs) {
  const std::string path = testing::saved_module("rowwise", kRowwise);
  const at::Tensor scale = at::randn({16, 16});
  const GraphSet set = compile_graph_set(path, {at::randn({3, 16}), scale}, buckets({8, 2, 4, 2}), cpu_options());
  EXPECT_EQ(set.batch_sizes(), (std::vector<std::int64_t>{2, 4, 8}));
  EXPECT_EQ(set.batched_inputs(), (std::vector<int>{0})) << "scale's first dimension is not the batch's";
  for (std::int64_t rows : {1, 2, 3, 4, 5, 8, 9, 17, 20})
    expect_like_the_model(set, path, at::randn({rows, 16}), scale);
  const GraphSetStats stats = set.stats();
  EXPECT_EQ(stats.calls, 9u);
  EXPECT_EQ(stats.rows, 1u + 2 + 3 + 4 + 5 + 8 + 9 + 17 + 20);
  EXPECT_EQ(stats.split_calls, 3u);  // 9, 17 and 20 rows: more than the largest bucket
  // 1 -> 2, 3 -> 4, 5 -> 8, 9 -> 8 + 2, 17 -> 8 + 8 + 2, 20 -> 8 + 8 + 4: 1 + 1 + 3 + 1 + 1 rows of padding.
  EXPECT_EQ(stats.padded_rows, 7u);
  EXPECT_FALSE(stats.shared_pool);
}

// A model whose operators fix its batch size (a view to [n, 4, 4]) is given one graph per size.
std::string fixed_batch_module(std::int64_t rows) {
  const std::string source = fmt::format(R"(
def forward(self, x):
    return torch.relu(x.view({0}, 4, 4)).view({0}, 16) * 2.0
)",
                                         rows);
  return testing::saved_module(fmt::format("fixed_batch_{}", rows), source.c_str());
}

// The sizes as a caller lists them, unsorted and repeated: each bucket is compiled from its own
// size's graph (the smallest bucket was once compiled from the first size listed).
TEST(GraphSet, EachBucketGetsItsOwnSizesGraphWhateverTheOrderGiven) {
  std::map<std::int64_t, std::string> paths;
  for (std::int64_t rows : {1, 4, 8}) paths[rows] = fixed_batch_module(rows);
  std::vector<std::int64_t> asked;
  const GraphForBatch graph_for = [&](std::int64_t size) {
    asked.push_back(size);
    return load(paths.at(size));
  };
  const GraphSet set = compile_graph_set(graph_for, {at::randn({3, 16})}, buckets({8, 1, 8, 4}), cpu_options());
  EXPECT_EQ(set.batch_sizes(), (std::vector<std::int64_t>{1, 4, 8}));
  EXPECT_EQ(asked, (std::vector<std::int64_t>{1, 4, 8})) << "each size's graph made once, smallest first";
  for (std::int64_t rows : {1, 3, 4, 6, 8, 11}) {
    const at::Tensor x = at::randn({rows, 16});
    const std::vector<at::Tensor> outputs = set.run({x});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(at::allclose(outputs[0], at::relu(x) * 2.0)) << rows << " rows";
  }
}

TEST(GraphSet, BadRequestsNameTheInputAndTheShapeExpected) {
  const std::string path = testing::saved_module("rowwise", kRowwise);
  const at::Tensor scale = at::randn({16, 16});
  const GraphSet set = compile_graph_set(path, {at::randn({2, 16}), scale}, buckets({2, 4}), cpu_options());
  const auto error_of = [&](const std::vector<at::Tensor>& inputs) -> std::string {
    try {
      set.run(inputs);
    } catch (const Error& error) {
      return error.what();
    }
    return "no error";
  };
  EXPECT_THAT(error_of({at::randn({3, 15}), scale}), HasSubstr("input 0 ('x.1') has shape [3, 15]; the graph set "
                                                               "takes [*, 16] (any number of rows first)"));
  EXPECT_THAT(error_of({at::randn({16}), scale}), HasSubstr("has shape [16]; the graph set takes [*, 16]"));
  EXPECT_THAT(error_of({at::randn({3, 16}).to(at::kDouble), scale}), HasSubstr("has dtype Double"));
  EXPECT_THAT(error_of({at::randn({0, 16}), scale}), HasSubstr("input 0 ('x.1') has no rows"));
  EXPECT_THAT(error_of({at::randn({3, 16}), at::randn({8, 16})}),
              HasSubstr("input 1 ('scale.1') has shape [8, 16]; the graph set takes [16, 16]"));
  EXPECT_THAT(error_of({at::randn({3, 16})}), HasSubstr("takes 2 inputs (x.1, scale.1), 1 were given"));
  // The set goes on serving.
  expect_like_the_model(set, path, at::randn({3, 16}), scale);
}

TEST(GraphSet, ModelsThatMixRowsOrReturnBatchTotalsAreRefused) {
  EXPECT_THAT(compile_error(testing::saved_module("mixes_rows", kMixesRows), {at::randn({2, 8})}, buckets({1, 4})),
              HasSubstr("the outputs mix rows: output 0's first row changed"));
  EXPECT_THAT(compile_error(testing::saved_module("divides_by_the_batch", kDividesByTheBatch), {at::randn({2, 8})},
                            buckets({1, 4})),
              HasSubstr("output 0's first row differs between batch sizes 1 and 4"));
  EXPECT_THAT(compile_error(testing::saved_module("batch_total", kBatchTotal), {at::randn({2, 8})}, buckets({1, 4})),
              HasSubstr("at batch size 1: output 1 has shape [] for 1 rows: it is not batched"));
  Options views = cpu_options();
  views.outputs = Options::Outputs::kView;
  try {
    compile_graph_set(testing::saved_module("rowwise", kRowwise), {at::randn({2, 16}), at::randn({16, 16})},
                      buckets({2}), views);
    ADD_FAILURE() << "a graph set with view outputs was compiled";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("not for graph sets"));
  }
  GraphSetOptions none = buckets({});
  EXPECT_THAT(
      compile_error(testing::saved_module("rowwise", kRowwise), {at::randn({2, 16}), at::randn({16, 16})}, none),
      HasSubstr("needs at least one batch size"));
  GraphSetOptions wrong = buckets({2});
  wrong.batched_inputs = std::vector<int>{5};
  EXPECT_THAT(
      compile_error(testing::saved_module("rowwise", kRowwise), {at::randn({2, 16}), at::randn({16, 16})}, wrong),
      HasSubstr("batched input 5 does not exist"));
  EXPECT_THAT(compile_error(testing::saved_module("rowwise", kRowwise), {at::randn({2, 16}), at::randn({16, 16})},
                            buckets({0, 2})),
              HasSubstr("batch size 0 is not a positive number of rows"));
}

TEST(GraphSet, ThreadsCallingOneSetEachGetTheirOwnAnswers) {
  const std::string path = testing::saved_module("rowwise", kRowwise);
  const at::Tensor scale = at::randn({16, 16});
  const GraphSet set = compile_graph_set(path, {at::randn({2, 16}), scale}, buckets({1, 2, 4, 8}), cpu_options());
  constexpr int kThreads = 6;
  constexpr int kCalls = 40;
  std::atomic<int> wrong{0};
  std::atomic<int> done{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int call = 0; call < kCalls; ++call) {
        // Each call's rows hold its thread and call: an answer that went to another caller shows.
        const std::int64_t rows = 1 + (t + call) % 11;
        const at::Tensor x = at::full({rows, 16}, 0.01 * (t * kCalls + call)) + at::arange(16).to(at::kFloat) * 1e-3;
        const at::Tensor expected = at::tanh(at::matmul(x, scale)) * at::sigmoid(x).sum(1, true);
        const std::vector<at::Tensor> outputs = set.run({x, scale});
        if (!at::allclose(outputs.at(0), expected, 1e-4, 1e-5)) ++wrong;
        ++done;
      }
    });
  }
  for (std::thread& thread : threads) thread.join();
  EXPECT_EQ(done.load(), kThreads * kCalls) << "a call was lost";
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(set.stats().calls, static_cast<std::size_t>(kThreads * kCalls));
}

// Close to the CPU's answer: cuBLAS sums a row in another order than the CPU (and in another for
// each number of rows), so a value near zero is compared at the precision of the row's largest.
bool close_to_cpu(const at::Tensor& on_the_gpu, const at::Tensor& expected) {
  return at::allclose(on_the_gpu.cpu(), expected, 1e-4, 1e-4 * expected.abs().max().item<double>());
}

TEST(GraphSet, OnTheGpuTheBucketsShareAPoolAndGiveTheModelsOutputs) {
  OPARA_REQUIRE_GPU();
  const std::string path = testing::saved_module("rowwise", kRowwise);
  const at::Tensor scale = at::randn({256, 256}).cuda();
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  const GraphSet set = compile_graph_set(path, {at::randn({2, 256}).cuda(), scale}, buckets({1, 4, 16}), options);
  EXPECT_TRUE(set.stats().shared_pool);
  for (std::int64_t rows : {1, 3, 16, 21}) {
    const at::Tensor x = at::randn({rows, 256}).cuda();
    const std::vector<at::Tensor> expected = torchscript_forward(path, {x.cpu(), scale.cpu()});
    const std::vector<at::Tensor> outputs = set.run({x, scale});
    for (std::size_t k = 0; k < outputs.size(); ++k) {
      EXPECT_TRUE(close_to_cpu(outputs[k], expected[k])) << rows << " rows, output " << k;
    }
  }
  GraphSetOptions apart = buckets({1, 4, 16});
  apart.share_pool = false;
  const GraphSet separate = compile_graph_set(path, {at::randn({2, 256}).cuda(), scale}, apart, options);
  EXPECT_FALSE(separate.stats().shared_pool);
  EXPECT_LE(set.stats().pool_bytes, separate.stats().pool_bytes) << "sharing a pool took more memory";
}

// "cuda" as a user writes it, without an index (bench/serve_load.py passes exactly that): the set
// compiles on the current device; where no GPU is, the error says so and what to do.
TEST(GraphSet, CudaWithoutAGpuIsRefusedSayingSo) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a GPU is visible here";
  Options options;
  options.device = c10::Device(c10::kCUDA);
  try {
    compile_graph_set(testing::saved_module("rowwise", kRowwise), {at::randn({2, 16}), at::randn({16, 16})},
                      buckets({1, 4}), options);
    ADD_FAILURE() << "a graph set compiled for CUDA without a GPU";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("rowwise"));
    EXPECT_THAT(error.what(), HasSubstr("needs a CUDA GPU"));
  }
}

TEST(GraphSet, OnTheGpuCudaWithoutAnIndexIsTheCurrentDevice) {
  OPARA_REQUIRE_GPU();
  const std::string path = testing::saved_module("rowwise", kRowwise);
  const at::Tensor scale = at::randn({256, 256});
  Options options;
  options.device = c10::Device(c10::kCUDA);
  const GraphSet set = compile_graph_set(path, {at::randn({2, 256}).cuda(), scale.cuda()}, buckets({1, 4}), options);
  EXPECT_TRUE(set.stats().shared_pool);
  const at::Tensor x = at::randn({3, 256});
  const std::vector<at::Tensor> expected = torchscript_forward(path, {x, scale});
  const std::vector<at::Tensor> outputs = set.run({x.cuda(), scale.cuda()});
  EXPECT_TRUE(close_to_cpu(outputs.at(0), expected.at(0)));
}

}  // namespace
}  // namespace opara
