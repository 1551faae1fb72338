#include "import/symbolic_scalar_op.h"

#include <fmt/format.h>

#include <cmath>
#include <functional>
#include <unordered_map>

#include "opara/error.h"

namespace opara {
namespace {

using Operands = std::vector<c10::IValue>;
using Function = std::function<c10::IValue(const Operands&)>;

// Python's // and % on integers: rounded towards minus infinity.
std::int64_t floor_div(std::int64_t a, std::int64_t b) {
  if (b == 0) throw Error("integer division by zero in a size computation");
  const std::int64_t quotient = a / b;
  return (a % b != 0 && ((a < 0) != (b < 0))) ? quotient - 1 : quotient;
}

std::int64_t python_mod(std::int64_t a, std::int64_t b) {
  return a - floor_div(a, b) * b;
}

bool both_ints(const Operands& x) {
  return x[0].isInt() && x[1].isInt();
}
double real(const c10::IValue& value) {
  return value.isBool() ? value.toBool() : value.toScalar().toDouble();
}
std::int64_t integer(const c10::IValue& value) {
  return value.isBool() ? value.toBool() : value.toInt();
}

// An arithmetic operator: on two ints an int, else a float (Python's promotion).
Function arithmetic(std::int64_t (*on_ints)(std::int64_t, std::int64_t), double (*on_reals)(double, double)) {
  return [on_ints, on_reals](const Operands& x) -> c10::IValue {
    return both_ints(x) ? c10::IValue(on_ints(x[0].toInt(), x[1].toInt()))
                        : c10::IValue(on_reals(real(x[0]), real(x[1])));
  };
}

Function comparison(bool (*compare)(double, double)) {
  return [compare](const Operands& x) -> c10::IValue { return compare(real(x[0]), real(x[1])); };
}

Function rounding(double (*round)(double)) {
  return [round](const Operands& x) -> c10::IValue {
    return x[0].isInt() ? x[0].toInt() : static_cast<std::int64_t>(round(real(x[0])));
  };
}

// By target, how many operands and the function.
const std::unordered_map<std::string, std::pair<std::size_t, Function>>& functions() {
  static const std::unordered_map<std::string, std::pair<std::size_t, Function>> table = {
      {"add",
       {2, arithmetic([](std::int64_t a, std::int64_t b) { return a + b; }, [](double a, double b) { return a + b; })}},
      {"sub",
       {2, arithmetic([](std::int64_t a, std::int64_t b) { return a - b; }, [](double a, double b) { return a - b; })}},
      {"mul",
       {2, arithmetic([](std::int64_t a, std::int64_t b) { return a * b; }, [](double a, double b) { return a * b; })}},
      {"floordiv", {2, arithmetic(floor_div, [](double a, double b) { return std::floor(a / b); })}},
      {"mod", {2, arithmetic(python_mod, [](double a, double b) { return a - std::floor(a / b) * b; })}},
      {"truediv", {2, [](const Operands& x) -> c10::IValue { return real(x[0]) / real(x[1]); }}},
      {"neg",
       {1,
        [](const Operands& x) -> c10::IValue {
          return x[0].isInt() ? c10::IValue(-x[0].toInt()) : c10::IValue(-real(x[0]));
        }}},
      {"eq", {2, comparison([](double a, double b) { return a == b; })}},
      {"ne", {2, comparison([](double a, double b) { return a != b; })}},
      {"lt", {2, comparison([](double a, double b) { return a < b; })}},
      {"le", {2, comparison([](double a, double b) { return a <= b; })}},
      {"gt", {2, comparison([](double a, double b) { return a > b; })}},
      {"ge", {2, comparison([](double a, double b) { return a >= b; })}},
      {"and_", {2, [](const Operands& x) -> c10::IValue { return integer(x[0]) != 0 && integer(x[1]) != 0; }}},
      {"or_", {2, [](const Operands& x) -> c10::IValue { return integer(x[0]) != 0 || integer(x[1]) != 0; }}},
      {"not_", {1, [](const Operands& x) -> c10::IValue { return integer(x[0]) == 0; }}},
      {"sym_not", {1, [](const Operands& x) -> c10::IValue { return integer(x[0]) == 0; }}},
      {"sym_max", {2, [](const Operands& x) -> c10::IValue { return real(x[0]) >= real(x[1]) ? x[0] : x[1]; }}},
      {"sym_min", {2, [](const Operands& x) -> c10::IValue { return real(x[0]) <= real(x[1]) ? x[0] : x[1]; }}},
      {"sym_float", {1, [](const Operands& x) -> c10::IValue { return real(x[0]); }}},
      {"sym_int", {1, rounding(std::trunc)}},
      {"sym_ite", {3, [](const Operands& x) -> c10::IValue { return integer(x[0]) != 0 ? x[1] : x[2]; }}},
      {"ceil", {1, rounding(std::ceil)}},
      {"floor", {1, rounding(std::floor)}},
      {"trunc", {1, rounding(std::trunc)}},
  };
  return table;
}

// "_operator.mul" -> "mul", "torch.sym_max" -> "sym_max", "math.ceil" -> "ceil"; empty for others.
std::string function_name(const std::string& target) {
  for (const char* prefix : {"_operator.", "operator.", "torch.", "math."}) {
    const std::string text(prefix);
    if (target.rfind(text, 0) != 0) continue;
    std::string name = target.substr(text.size());
    const bool math_only = name == "ceil" || name == "floor" || name == "trunc";
    if (text == "math." ? math_only : (text == "torch." ? name.rfind("sym_", 0) == 0 : !math_only)) return name;
  }
  return {};
}

class SymbolicScalarOp final : public NodeOp {
 public:
  SymbolicScalarOp(Function function, std::vector<ArgumentSlot> operands)
      : function_(std::move(function)), operands_(std::move(operands)) {}

  void run(std::vector<c10::IValue>& stack) const override {
    c10::IValue result = function_(call_arguments(stack));
    stack.clear();
    stack.push_back(std::move(result));
  }

  [[nodiscard]] std::vector<c10::IValue> call_arguments(const std::vector<c10::IValue>& inputs) const override {
    Operands values;
    for (const ArgumentSlot& operand : operands_) {
      values.push_back(operand.kind == ArgumentSlot::Kind::kValue ? inputs[operand.positions[0]] : operand.constant);
    }
    return values;
  }

  [[nodiscard]] std::shared_ptr<const NodeOp> to(c10::Device) const override {
    return std::make_shared<SymbolicScalarOp>(function_, operands_);
  }

 private:
  Function function_;
  std::vector<ArgumentSlot> operands_;
};

}  // namespace

bool is_symbolic_arithmetic(const std::string& target) {
  return target.rfind("_operator.", 0) == 0 || target.rfind("operator.", 0) == 0 || target.rfind("math.", 0) == 0 ||
         target.rfind("torch.sym_", 0) == 0;
}

std::shared_ptr<const NodeOp> symbolic_scalar_op(const std::string& target, std::vector<ArgumentSlot> operands) {
  const auto found = functions().find(function_name(target));
  if (found == functions().end() || found->second.first != operands.size()) return nullptr;
  for (const ArgumentSlot& operand : operands) {
    const bool number = operand.kind == ArgumentSlot::Kind::kValue ||
                        (operand.kind == ArgumentSlot::Kind::kConstant &&
                         (operand.constant.isInt() || operand.constant.isDouble() || operand.constant.isBool()));
    if (!number) return nullptr;
  }
  return std::make_shared<SymbolicScalarOp>(found->second.second, std::move(operands));
}

}  // namespace opara
