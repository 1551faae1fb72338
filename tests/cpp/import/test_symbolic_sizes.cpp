// Dynamic-shape programs (torch.export with dynamic_shapes): one program compiles for every size
// its export allows, each compile giving the module's outputs; a size outside its range, a fixed
// size changed, two sizes the export made one, and sizes its conditions (guards) exclude are
// refused naming the input, the dimension and what the program allows. The arithmetic on sizes
// follows Python's rules (symbolic_scalar_op.h).
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <ATen/ATen.h>
#include <torch/cuda.h>

#include <string>

#include "import/symbolic_scalar_op.h"
#include "model_files.h"
#include "opara/compiled_model.h"
#include "opara/error.h"

namespace opara {
namespace {

using ::testing::HasSubstr;

Options cpu_options() {
  Options options;
  options.device = c10::kCPU;
  return options;
}

std::string compile_error(const std::string& path, const std::vector<at::Tensor>& inputs) {
  try {
    compile(path, inputs, cpu_options());
  } catch (const Error& error) {
    return error.what();
  }
  return "no error";
}

// dynamic_batch.pt2: x.relu().reshape(x.shape[0], 2, 2), the batch a Dim in [2, 64].
TEST(SymbolicSizes, OneProgramCompilesForEverySizeItsExportAllows) {
  const std::string path = testing::fixture_path("dynamic_batch.pt2");
  for (int64_t batch : {2, 3, 17, 64}) {
    const at::Tensor x = at::randn({batch, 4});
    CompiledModel model = compile(path, {x}, cpu_options());
    const std::vector<at::Tensor> outputs = model.run({x});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(at::equal(outputs[0], x.relu().reshape({batch, 2, 2}))) << "batch " << batch;
  }
}

TEST(SymbolicSizes, ASizeOutsideTheExportsRangeIsRefusedNamingTheRange) {
  const std::string path = testing::fixture_path("dynamic_batch.pt2");
  for (int64_t batch : {1, 65}) {
    const std::string message = compile_error(path, {at::randn({batch, 4})});
    EXPECT_THAT(message, HasSubstr("dynamic_batch.pt2: input 0 ('x') dimension 0 is " + std::to_string(batch) +
                                   ", outside the sizes the program was exported for ("));
    EXPECT_THAT(message, HasSubstr(" in [2, 64]). Export it again with a wider range for this dimension"));
  }
}

TEST(SymbolicSizes, AFixedSizeChangedIsRefusedNamingTheDimension) {
  const std::string message = compile_error(testing::fixture_path("dynamic_batch.pt2"), {at::randn({3, 5})});
  EXPECT_THAT(message, HasSubstr("input 0 ('x') dimension 1 is 5; the program was exported with it fixed at 4"));
}

// symbolic_guard.pt2: x[: x.shape[0] - 1] + y[1:], both first sizes one symbol, exported under the
// condition that the size is not 2.
TEST(SymbolicSizes, AnotherSizeMeetingTheExportsConditionsGivesTheModulesOutputs) {
  for (int64_t rows : {3, 4, 9}) {
    const at::Tensor x = at::randn({rows, 3});
    const at::Tensor y = at::randn({rows, 3});
    CompiledModel model = compile(testing::fixture_path("symbolic_guard.pt2"), {x, y}, cpu_options());
    const std::vector<at::Tensor> outputs = model.run({x, y});
    ASSERT_EQ(outputs.size(), 1u);
    EXPECT_TRUE(at::equal(outputs[0], x.slice(0, 0, rows - 1) + y.slice(0, 1))) << rows << " rows";
  }
}

TEST(SymbolicSizes, SizesTheExportsConditionsExcludeAreRefusedNamingTheCondition) {
  const std::string message =
      compile_error(testing::fixture_path("symbolic_guard.pt2"), {at::randn({2, 3}), at::randn({2, 3})});
  EXPECT_THAT(message, HasSubstr("symbolic_guard.pt2: the inputs ('x' [2, 3], 'y' [2, 3]) do not meet the condition"));
  EXPECT_THAT(message, HasSubstr("L['x'].size()[0]"));
  EXPECT_THAT(message, HasSubstr("the program was exported under"));
}

TEST(SymbolicSizes, TwoSizesTheExportMadeOneMustBeEqual) {
  const std::string message =
      compile_error(testing::fixture_path("symbolic_guard.pt2"), {at::randn({4, 3}), at::randn({5, 3})});
  EXPECT_THAT(message, HasSubstr("input 1 ('y') dimension 0 is 5 and "));
  EXPECT_THAT(message, HasSubstr("input 0 ('x') dimension 0 is 4, and the program was exported with both the size "));
}

// On a GPU the sizes are computed while the graph is captured: each shape's graph holds its own,
// and replays give the module's outputs (the program was exported on the CPU).
TEST(SymbolicSizesCuda, EachShapesCapturedGraphGivesTheModulesOutputs) {
  OPARA_REQUIRE_GPU();
  Options options;
  options.device = c10::Device(c10::kCUDA, 0);
  for (int64_t rows : {3, 9}) {
    const at::Tensor x = at::randn({rows, 3}, at::kCUDA);
    const at::Tensor y = at::randn({rows, 3}, at::kCUDA);
    CompiledModel model = compile(testing::fixture_path("symbolic_guard.pt2"), {x, y}, options);
    for (int replay = 0; replay < 2; ++replay) {
      const std::vector<at::Tensor> outputs = model.run({x, y});
      ASSERT_EQ(outputs.size(), 1u);
      EXPECT_TRUE(at::allclose(outputs[0], x.slice(0, 0, rows - 1) + y.slice(0, 1))) << rows << " rows";
    }
  }
}

// The arithmetic on sizes, as Python computes it.
c10::IValue evaluate(const std::string& target, std::vector<c10::IValue> operands) {
  std::vector<ArgumentSlot> slots;
  for (std::size_t i = 0; i < operands.size(); ++i) {
    ArgumentSlot slot;
    slot.kind = ArgumentSlot::Kind::kValue;
    slot.positions = {static_cast<int>(i)};
    slots.push_back(slot);
  }
  auto op = symbolic_scalar_op(target, std::move(slots));
  if (!op) throw std::runtime_error("no op for " + target);
  op->run(operands);
  return operands.at(0);
}

TEST(SymbolicSizes, ArithmeticOnSizesFollowsPythonsRules) {
  EXPECT_EQ(evaluate("_operator.floordiv", {-7, 2}).toInt(), -4);
  EXPECT_EQ(evaluate("_operator.floordiv", {7, 2}).toInt(), 3);
  EXPECT_EQ(evaluate("_operator.mod", {-7, 2}).toInt(), 1);
  EXPECT_EQ(evaluate("_operator.mod", {7, -2}).toInt(), -1);
  EXPECT_EQ(evaluate("_operator.mul", {12, 64}).toInt(), 768);
  EXPECT_EQ(evaluate("_operator.sub", {8, 1}).toInt(), 7);
  EXPECT_DOUBLE_EQ(evaluate("_operator.truediv", {7, 2}).toDouble(), 3.5);
  EXPECT_DOUBLE_EQ(evaluate("_operator.add", {1, 0.5}).toDouble(), 1.5);
  EXPECT_EQ(evaluate("torch.sym_max", {3, 8}).toInt(), 8);
  EXPECT_EQ(evaluate("torch.sym_min", {3, 8}).toInt(), 3);
  EXPECT_EQ(evaluate("math.ceil", {2.5}).toInt(), 3);
  EXPECT_EQ(evaluate("math.floor", {-2.5}).toInt(), -3);
  EXPECT_TRUE(evaluate("_operator.ne", {7, 1}).toBool());
  EXPECT_FALSE(evaluate("_operator.ge", {1, 2}).toBool());
  EXPECT_TRUE(evaluate("torch.sym_not", {false}).toBool());
  EXPECT_EQ(evaluate("torch.sym_ite", {true, 4, 5}).toInt(), 4);
}

TEST(SymbolicSizes, ADivisionByZeroIsAnErrorNotACrash) {
  EXPECT_THROW(evaluate("_operator.floordiv", {7, 0}), Error);
  EXPECT_THROW(evaluate("_operator.mod", {7, 0}), Error);
}

TEST(SymbolicSizes, ArithmeticOpparaDoesNotEvaluateHasNoOp) {
  EXPECT_THROW(evaluate("math.sqrt", {4}), std::runtime_error);
  EXPECT_THROW(evaluate("_operator.add", {4}), std::runtime_error);  // one operand where two are due
  EXPECT_THROW(evaluate("math.add", {4, 2}), std::runtime_error);    // no such function there
}

}  // namespace
}  // namespace opara
