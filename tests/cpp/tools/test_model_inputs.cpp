// Sidecar JSON, --input-shape parsing, input generation and output comparison.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>

#include <fstream>

#include "exec/outputs.h"
#include "model_files.h"
#include "opara/error.h"
#include "tools/model_inputs.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

std::string error_of(const std::function<void()>& action) {
  try {
    action();
  } catch (const Error& error) {
    return error.what();
  }
  ADD_FAILURE() << "no opara::Error thrown";
  return {};
}

TEST(ModelInputs, SameSeedSameTensorsAsThePythonExporter) {
  for (const char* model : {"bert_base", "googlenet"}) {
    OPARA_REQUIRE_MODEL(model);
    const ModelSpec spec = read_model_spec(testing::model_path(model, "json"));
    const Reference reference = load_reference(spec.reference);
    EXPECT_TRUE(bitwise_equal(make_inputs(spec.inputs, spec.seed), reference.inputs)) << model;
  }
}

TEST(ModelInputs, SidecarDescribesIntegerRanges) {
  OPARA_REQUIRE_MODEL("bert_base");
  const ModelSpec spec = read_model_spec(testing::model_path("bert_base", "json"));
  ASSERT_EQ(spec.inputs.size(), 2u);
  EXPECT_EQ(spec.inputs[0].name, "input_ids");
  EXPECT_EQ(spec.inputs[0].shape, (std::vector<std::int64_t>{1, 32}));
  ASSERT_TRUE(spec.inputs[0].range.has_value());
  const auto ids = make_inputs(spec.inputs, 3)[0];
  EXPECT_GE(ids.min().item<std::int64_t>(), spec.inputs[0].range->first);
  EXPECT_LT(ids.max().item<std::int64_t>(), spec.inputs[0].range->second);
  ASSERT_TRUE(spec.intra_op_threads.has_value()) << "the exporter records the reference's thread count";
  EXPECT_GE(*spec.intra_op_threads, 1);
}

// A model exported in half precision: its sidecar says so, and its inputs are made in that dtype,
// the same tensors as the exporter's.
TEST(ModelInputs, HalfPrecisionExportsSayTheirDtypeAndMakeTheirInputsInIt) {
  struct Export {
    std::string model, dtype;
    c10::ScalarType type;
  };
  for (const Export& half :
       {Export{"branchy_bfloat16", "bfloat16", at::kBFloat16}, Export{"recurrent_float16", "float16", at::kHalf}}) {
    if (!testing::model_exported(half.model))
      GTEST_SKIP() << half.model << " is not exported: scripts/test.sh exports it";
    const ModelSpec spec = read_model_spec(testing::model_path(half.model, "json"));
    EXPECT_EQ(spec.dtype, half.dtype);
    const std::vector<at::Tensor> inputs = make_inputs(spec.inputs, spec.seed);
    ASSERT_EQ(inputs.size(), 1u) << half.model;
    EXPECT_EQ(inputs[0].scalar_type(), half.type) << half.model;
    EXPECT_TRUE(bitwise_equal(inputs, load_reference(spec.reference).inputs)) << half.model;
  }
  OPARA_REQUIRE_MODEL("branchy");
  EXPECT_EQ(read_model_spec(testing::model_path("branchy", "json")).dtype, "float32");
}

TEST(ModelInputs, MalformedSidecarNamesFileAndProblem) {
  const std::string path = testing::scratch_path("bad.json");
  std::ofstream(path) << R"({"inputs": [{"name": "x", "shape": "oops", "dtype": "float32"}]})";
  EXPECT_THAT(error_of([&] { read_model_spec(path); }), HasSubstr(path));
  std::ofstream(path) << R"({"inputs": [{"name": "x", "shape": [1], "dtype": "float7"}]})";
  EXPECT_THAT(error_of([&] { read_model_spec(path); }), HasSubstr("unknown dtype 'float7'"));
  std::ofstream(path) << R"({"dtype": "half", "inputs": []})";
  EXPECT_THAT(error_of([&] { read_model_spec(path); }), HasSubstr("unknown dtype 'half'"));
  std::ofstream(path) << "{not json";
  EXPECT_THAT(error_of([&] { read_model_spec(path); }), HasSubstr("malformed"));
  EXPECT_THAT(error_of([&] { read_model_spec("/nonexistent.json"); }), HasSubstr("/nonexistent.json"));
}

TEST(ModelInputs, InputShapeText) {
  const auto plain = parse_input_shapes("1x3x224x224");
  ASSERT_EQ(plain.size(), 1u);
  EXPECT_EQ(plain[0].shape, (std::vector<std::int64_t>{1, 3, 224, 224}));
  EXPECT_EQ(plain[0].dtype, "float32");
  const auto named = parse_input_shapes("ids:2x32:int64,mask:2x32:int64");
  ASSERT_EQ(named.size(), 2u);
  EXPECT_EQ(named[1].name, "mask");
  EXPECT_TRUE(named[1].range.has_value());
  // A half-precision model's inputs: floats in its dtype unless one says otherwise.
  const auto half = parse_input_shapes("x:1x3,ids:1x4:int64", "bfloat16");
  EXPECT_EQ(half[0].dtype, "bfloat16");
  EXPECT_EQ(half[1].dtype, "int64");
  EXPECT_THAT(error_of([] { parse_input_shapes("1x3", "float7"); }), HasSubstr("unknown dtype 'float7'"));
  EXPECT_THAT(error_of([] { parse_input_shapes("1xAx3"); }), HasSubstr("'A' is not a size"));
  EXPECT_THAT(error_of([] { parse_input_shapes("x:1x3:float7"); }), HasSubstr("unknown dtype"));
  EXPECT_THAT(error_of([] { parse_input_shapes("a:b:c:d"); }), HasSubstr("NAME:SHAPE[:DTYPE]"));
}

TEST(Outputs, BitwiseIsStricterThanNumericEquality) {
  const auto zero = at::zeros({3});
  const auto negative_zero = -at::zeros({3});
  EXPECT_EQ(max_abs_difference({zero}, {negative_zero}), 0.0);
  EXPECT_FALSE(bitwise_equal({zero}, {negative_zero}));
  EXPECT_TRUE(bitwise_equal({zero}, {zero.clone()}));
  EXPECT_FALSE(bitwise_equal({zero}, {zero.to(at::kDouble)}));
  EXPECT_NEAR(max_abs_difference({at::ones({2})}, {at::zeros({2})}), 1.0, 0);
  EXPECT_THAT(error_of([] { max_abs_difference({at::ones({2})}, {at::ones({3})}); }), HasSubstr("output 0"));
}

TEST(Outputs, FlattenWalksTuplesListsAndDicts) {
  const auto a = at::ones({1});
  const auto b = at::zeros({2});
  c10::impl::GenericDict dict(c10::StringType::get(), c10::TensorType::get());
  dict.insert("b", b);
  const auto flat = flatten_tensors({c10::ivalue::Tuple::create({a, c10::IValue(dict)})});
  ASSERT_EQ(flat.size(), 2u);
  EXPECT_TRUE(flat[1].equal(b));
}

}  // namespace
}  // namespace opara
