#pragma once
// The exported models among those a test loops over. A loop that passes over every model it
// cannot find checks nothing when none is there, and must then skip, not pass:
//
//   const testing::ExportedModels models = testing::exported_models(testing::all_models());
//   if (models.exported.empty()) GTEST_SKIP() << models.missing_text();
//   for (const std::string& model : models.exported) { ... }
//
// A run that finds only some of them checks those, and says which it left out.

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "model_files.h"

namespace opara::testing {

struct ExportedModels {
  std::vector<std::string> exported;  // in the order asked for
  std::vector<std::string> missing;

  [[nodiscard]] bool has(const std::string& name) const {
    return std::find(exported.begin(), exported.end(), name) != exported.end();
  }

  // The models not exported, where they were looked for, and how to export them.
  [[nodiscard]] std::string missing_text() const {
    const std::string folder = std::filesystem::path(model_path("NAME", "pt")).parent_path().string();
    return fmt::format(
        "not exported in {} ($OPARA_MODELS): {}. scripts/test.sh exports every test model; one by one: "
        "scripts/export_models.py --models NAME --out {} (NAME_float16: add --dtype float16)",
        folder, fmt::join(missing, ", "), folder);
  }
};

// Sorts `wanted` into the exported models and the missing ones. When some are missing but not
// all, the running test records them (property "not_exported" in the XML report) and prints them.
inline ExportedModels exported_models(const std::vector<std::string>& wanted) {
  ExportedModels models;
  for (const std::string& name : wanted) (model_exported(name) ? models.exported : models.missing).push_back(name);
  if (!models.exported.empty() && !models.missing.empty()) {
    ::testing::Test::RecordProperty("not_exported", fmt::format("{}", fmt::join(models.missing, " ")));
    std::cout << "note: checked " << fmt::format("{}", fmt::join(models.exported, ", ")) << " only; "
              << models.missing_text() << "\n";
  }
  return models;
}

}  // namespace opara::testing
