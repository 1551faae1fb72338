// A decoder that owns its KV caches, as gpt-fast keeps them (scripts/opara_models/decoder.py: a
// KVCache module with two buffers per layer, written at the position the call gives), compiled
// from its .pt2 by opara::compile as a C++ application would: greedy decoding, one token a step,
// gives the eager module's tokens, and after every step each of the four caches equals the eager
// module's (scripts/export_models.py keeps both in the decoder's reference file). TorchScript
// state is refused, saying to export the model with torch.export. On a GPU (skipped without one)
// the same, captured, with the position a device tensor: no step runs eagerly.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/csrc/jit/serialization/pickle.h>

#include <fstream>
#include <iterator>
#include <map>
#include <string>
#include <vector>

#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"
#include "opara/load.h"

namespace opara {
namespace {

// The eager module's greedy decoding (export_models.py, decode_reference).
struct Decoding {
  at::Tensor prompt;                                      // [1, P]
  at::Tensor tokens;                                      // [1, N]
  std::vector<std::map<std::string, at::Tensor>> caches;  // after each step, by buffer name
};

Decoding eager_decoding() {
  std::ifstream file(testing::model_path("decoder", "ref.pt"), std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  const auto reference = torch::jit::pickle_load(bytes).toGenericDict();
  Decoding decoding{reference.at("prompt").toTensor(), reference.at("tokens").toTensor(), {}};
  for (const c10::IValue& step : reference.at("caches").toList().vec()) {
    std::map<std::string, at::Tensor> caches;
    for (const auto& entry : step.toGenericDict()) caches[entry.key().toStringRef()] = entry.value().toTensor();
    decoding.caches.push_back(std::move(caches));
  }
  return decoding;
}

void expect_eagers_tokens_and_caches(c10::Device device) {
  const Decoding eager = eager_decoding();
  const std::int64_t prompt = eager.prompt.size(1);
  const std::int64_t steps = prompt + eager.tokens.size(1) - 1;
  ASSERT_EQ(static_cast<std::int64_t>(eager.caches.size()), steps);
  Options options;
  options.device = device;
  options.cpu.tuning_ms = 0;
  const auto token_at = [&](std::int64_t position) { return eager.prompt.narrow(1, position, 1).to(device); };
  const auto position_of = [&](std::int64_t position) { return at::tensor({position}).to(device); };
  const CompiledModel model = compile(testing::model_path("decoder", "pt2"), {token_at(0), position_of(0)}, options);
  ASSERT_EQ(model.state().size(), 4u) << "a K and a V cache per layer";
  for (const auto& [name, cache] : model.state()) {
    EXPECT_EQ(cache.count_nonzero().item<std::int64_t>(), 0) << "compiling wrote " << name;
  }
  std::vector<at::Tensor> tokens;
  at::Tensor token = token_at(0);
  for (std::int64_t position = 0; position < steps; ++position) {
    SCOPED_TRACE("step " + std::to_string(position));
    const at::Tensor logits = model.run({token, position_of(position)}).at(0);
    for (const auto& [name, cache] : model.state()) {
      const auto expected = eager.caches[static_cast<std::size_t>(position)].find(name);
      ASSERT_NE(expected, eager.caches[static_cast<std::size_t>(position)].end()) << "no eager cache " << name;
      EXPECT_TRUE(at::allclose(cache.cpu(), expected->second, 1e-4, 1e-5)) << name;
    }
    const at::Tensor next = logits.select(1, -1).argmax(-1, /*keepdim=*/true);
    if (position + 1 >= prompt) tokens.push_back(next.cpu());
    token = position + 1 < prompt ? token_at(position + 1) : next;
  }
  EXPECT_TRUE(at::equal(at::cat(tokens, 1), eager.tokens)) << at::cat(tokens, 1) << " against " << eager.tokens;
  if (device.is_cuda()) {
    EXPECT_EQ(model.stats().eager_fallbacks, 0u) << "a step ran eagerly";
  }
}

TEST(DecoderState, GreedyDecodingGivesEagersTokensAndCachesOnTheCpu) {
  OPARA_REQUIRE_MODEL("decoder");
  expect_eagers_tokens_and_caches(c10::kCPU);
}

TEST(DecoderState, OnTheGpuGreedyDecodingGivesEagersTokensAndCaches) {
  OPARA_REQUIRE_GPU();
  OPARA_REQUIRE_MODEL("decoder");
  expect_eagers_tokens_and_caches(c10::Device(c10::kCUDA, 0));
}

TEST(DecoderState, ItsTorchScriptIsRefusedSayingToExportIt) {
  OPARA_REQUIRE_MODEL("decoder");
  try {
    load(testing::model_path("decoder", "pt"));
    ADD_FAILURE() << "a TorchScript model that writes its buffers was accepted";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("decoder_b1.pt"));
    EXPECT_THAT(error.what(), ::testing::HasSubstr("torch.export"));
  }
}

}  // namespace
}  // namespace opara
