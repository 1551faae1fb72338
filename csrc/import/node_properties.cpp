#include "import/node_properties.h"

#include <fmt/format.h>

#include "graph/op_table.h"
#include "opara/graph.h"

namespace opara {
namespace {

bool holds_tensors(const c10::TypePtr& type) {
  if (auto optional = type->cast<c10::OptionalType>()) return holds_tensors(optional->getElementType());
  if (auto list = type->cast<c10::ListType>()) return holds_tensors(list->getElementType());
  return type->kind() == c10::TypeKind::TensorType;
}

}  // namespace

std::uint32_t node_flags(std::string_view kind, const c10::FunctionSchema* schema, bool makes_tensor) {
  const OpTraits traits = op_traits(kind);
  std::uint32_t flags = traits.not_capturable ? std::uint32_t{kNotCapturable} : 0u;
  bool writes = false;
  if (schema) {
    writes = schema->is_mutable();
    makes_tensor = false;
    for (const c10::Argument& result : schema->returns()) {
      if (result.alias_info() && !result.alias_info()->isWrite()) {
        flags |= kView;
      } else if (!result.alias_info() && holds_tensors(result.type())) {
        makes_tensor = true;
      }
    }
  }
  if (traits.unannotated_view) flags |= kView;
  if (writes) flags |= kWritesInput;
  if (traits.launches_kernel && (writes || makes_tensor || traits.may_copy || traits.checks_on_device)) {
    flags |= kLaunchesKernel;
  }
  return flags;
}

std::string constant_summary(const c10::IValue& value) {
  if (value.isTensor()) return fmt::format("Tensor{}", c10::str(value.toTensor().sizes()));
  std::string text = c10::str(value);
  if (text.size() > 40) {
    // Cut in place: substr(...) + "..." trips GCC 12's -Warray-bounds with torch 2.15's headers.
    text.resize(37);
    text += "...";
  }
  return text;
}

}  // namespace opara
