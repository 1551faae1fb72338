#include "import/exported_input_sizes.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <regex>

#include "import/import_errors.h"

namespace opara {
namespace {

// A lone symbol as the schema writes it: "Symbol('s27', positive=True, integer=True)" (sympy's
// srepr), or plainly "s27"; empty for an expression of symbols.
std::string symbol_of(const std::string& expression) {
  static const std::regex srepr(R"(^Symbol\('([A-Za-z_][A-Za-z0-9_]*)'.*\)$)");
  static const std::regex plain(R"(^[A-Za-z_][A-Za-z0-9_]*$)");
  std::smatch match;
  if (std::regex_match(expression, match, srepr)) return match[1];
  if (std::regex_match(expression, plain)) return expression;
  return {};
}

}  // namespace

std::vector<InputSize> exported_input_sizes(const ep::TensorMeta& meta,
                                            const std::unordered_map<std::string, ep::RangeConstraint>& ranges,
                                            const std::string& path, const std::string& input) {
  std::vector<InputSize> sizes;
  for (const ep::SymInt& value : meta.get_sizes()) {
    InputSize size;
    if (value.tag() == ep::SymInt::Tag::AS_INT) {
      size.fixed = value.get_as_int();
      sizes.push_back(size);
      continue;
    }
    const std::string& expression = value.get_as_expr().get_expr_str();
    size.symbol = symbol_of(expression);
    if (size.symbol.empty()) {
      fail_import(path,
                  "the input {} has the size {} in dimension {}, an expression of other sizes, which opara cannot "
                  "bind. Export it with that dimension static, or as a Dim of its own",
                  input, expression, sizes.size());
    }
    if (auto range = ranges.find(size.symbol); range != ranges.end()) {
      size.min = std::max<std::int64_t>(0, range->second.get_min_val().value_or(0));
      if (range->second.get_max_val()) size.max = *range->second.get_max_val();
    }
    sizes.push_back(size);
  }
  return sizes;
}

std::vector<InputGuard> exported_input_guards(const std::vector<std::string>& guards_code,
                                              const std::vector<std::string>& input_names, const std::string& path) {
  static const std::regex access(R"(L((?:\[(?:'[^']*'|\d+)\])+))");
  static const std::regex key(R"(\[(?:'([^']*)'|(\d+))\])");
  std::vector<InputGuard> guards;
  for (const std::string& code : guards_code) {
    std::string script;
    auto last = code.cbegin();
    for (std::sregex_iterator match(code.begin(), code.end(), access), end; match != end; ++match) {
      std::vector<std::string> keys;
      const std::string path_text = (*match)[1];
      for (std::sregex_iterator part(path_text.begin(), path_text.end(), key); part != end; ++part) {
        keys.push_back((*part)[1].matched ? (*part)[1].str() : (*part)[2].str());
      }
      const std::string name = fmt::format("{}", fmt::join(keys, "_"));
      const auto input = std::find(input_names.begin(), input_names.end(), name);
      if (input == input_names.end()) {
        fail_import(path,
                    "the program was exported under the condition {}, which reads {}, none of its inputs ({}); "
                    "opara cannot check it. Export the model with its tensors as arguments",
                    code, match->str(), fmt::join(input_names, ", "));
      }
      script.append(last, code.cbegin() + match->position());
      script += fmt::format("inputs[{}]", input - input_names.begin());
      last = code.cbegin() + match->position() + match->length();
    }
    script.append(last, code.cend());
    guards.push_back({code, script});
  }
  return guards;
}

bool any_symbolic(const std::vector<InputSize>& sizes) {
  return std::any_of(sizes.begin(), sizes.end(), [](const InputSize& size) { return !size.symbol.empty(); });
}

}  // namespace opara
