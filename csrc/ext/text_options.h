#pragma once

// The extension's options arrive as a TorchScript Dict(str, str).

#include <ATen/core/Dict.h>

#include <map>
#include <optional>
#include <string>

#include "opara/options.h"

namespace opara::ext {

inline Options options_from_dict(const std::optional<c10::Dict<std::string, std::string>>& dict) {
  std::map<std::string, std::string> text;
  if (dict) {
    for (const auto& entry : *dict) text.emplace(entry.key(), entry.value());
  }
  return options_from_text(text);
}

}  // namespace opara::ext
