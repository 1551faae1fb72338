#include "import/container_ops.h"

#include <ATen/core/Dict.h>
#include <ATen/core/List.h>

namespace opara {
namespace {

using torch::jit::Stack;

std::vector<c10::IValue> pop_all(Stack& stack, std::size_t count) {
  std::vector<c10::IValue> values(std::make_move_iterator(stack.end() - static_cast<std::ptrdiff_t>(count)),
                                  std::make_move_iterator(stack.end()));
  stack.resize(stack.size() - count);
  return values;
}

}  // namespace

std::optional<torch::jit::Operation> container_operation(const torch::jit::Node* node) {
  const std::size_t inputs = node->inputs().size();
  const std::size_t outputs = node->outputs().size();
  switch (node->kind()) {
    case c10::prim::ListConstruct: {
      const c10::TypePtr element = node->output()->type()->expectRef<c10::ListType>().getElementType();
      return torch::jit::Operation([element, inputs](Stack& stack) {
        c10::impl::GenericList list(element);
        list.reserve(inputs);
        for (auto& value : pop_all(stack, inputs)) list.push_back(std::move(value));
        stack.emplace_back(std::move(list));
      });
    }
    case c10::prim::TupleConstruct:
      return torch::jit::Operation(
          [inputs](Stack& stack) { stack.emplace_back(c10::ivalue::Tuple::create(pop_all(stack, inputs))); });
    case c10::prim::ListUnpack:
      return torch::jit::Operation([outputs](Stack& stack) {
        const auto list = stack.back().toList();
        TORCH_CHECK(list.size() == outputs, "expected a list of ", outputs, " elements, got ", list.size());
        stack.pop_back();
        for (const c10::IValue& element : list) stack.push_back(element);
      });
    case c10::prim::TupleUnpack:
      return torch::jit::Operation([](Stack& stack) {
        const auto tuple = stack.back().toTuple();
        stack.pop_back();
        for (const c10::IValue& element : tuple->elements()) stack.push_back(element);
      });
    case c10::prim::TupleIndex:
      return torch::jit::Operation([](Stack& stack) {
        const auto index = stack.back().toInt();
        stack.pop_back();
        const auto tuple = stack.back().toTuple();
        stack.pop_back();
        const auto size = static_cast<std::int64_t>(tuple->elements().size());
        stack.push_back(tuple->elements().at(static_cast<std::size_t>(index < 0 ? index + size : index)));
      });
    case c10::prim::DictConstruct: {
      const auto& type = node->output()->type()->expectRef<c10::DictType>();
      const c10::TypePtr key = type.getKeyType();
      const c10::TypePtr value = type.getValueType();
      return torch::jit::Operation([key, value, inputs](Stack& stack) {
        c10::impl::GenericDict dict(key, value);
        auto entries = pop_all(stack, inputs);
        for (std::size_t i = 0; i + 1 < entries.size(); i += 2) dict.insert_or_assign(entries[i], entries[i + 1]);
        stack.emplace_back(std::move(dict));
      });
    }
    default: return std::nullopt;
  }
}

}  // namespace opara
