#pragma once

// One package file: its records by name, and its description (opara/meta.json), each failure
// naming the file and the part.

#include <caffe2/serialize/inline_container.h>

#include <memory>
#include <string>
#include <vector>

#include "opara/package.h"

namespace opara {

class PackageArchive {
 public:
  explicit PackageArchive(std::string path);

  [[nodiscard]] const std::string& path() const { return path_; }
  [[nodiscard]] const PackageInfo& info() const { return info_; }

  // The record's bytes; a missing one is refused naming it ("opara/regions/3.pt2").
  [[nodiscard]] std::string record(const std::string& name) const;

  // The example inputs the package was made with (opara/inputs/<i>.bin, laid out as meta.json says).
  [[nodiscard]] std::vector<at::Tensor> example_inputs() const;

 private:
  std::string path_;
  std::unique_ptr<caffe2::serialize::PyTorchStreamReader> reader_;
  PackageInfo info_;
};

// StoredChoice as opara/choice.json holds it, and back (nlohmann::json::exception on a damaged one).
std::string choice_json(const StoredChoice& choice);
StoredChoice parse_choice(const std::string& json);

// Why `inputs` cannot be a call of the package `info` describes (empty: they can): another count,
// dtype or sizes, naming the input.
std::string package_inputs_misfit(const PackageInfo& info, const std::vector<at::Tensor>& inputs);

// The records a package holds, as opara.package writes them.
inline constexpr const char* kPackageMeta = "opara/meta.json";
inline constexpr const char* kPackageProgram = "opara/program.pt2";
inline constexpr const char* kPackageRegions = "opara/regions.json";
inline constexpr const char* kPackageChoice = "opara/choice.json";  // StoredChoice, where a load kept one
std::string package_region_record(std::int64_t key);                // "opara/regions/<key>.pt2"

}  // namespace opara
