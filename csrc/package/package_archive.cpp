#include "package/package_archive.h"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <nlohmann/json.hpp>

#include "exec/first_line.h"
#include "import/archive.h"
#include "opara/error.h"

namespace opara {
namespace {

// The package format this opara reads; opara.package writes the same.
constexpr int kPackageFormat = 1;

[[noreturn]] void fail_package(const std::string& path, const std::string& problem) {
  throw Error(fmt::format("{}: {}", path, problem));
}

// A dtype as Python names it ("float32"), for the example inputs.
at::ScalarType dtype_named(const std::string& name, const std::string& path) {
  static const std::map<std::string, at::ScalarType> kNames = {{"float32", at::kFloat},
                                                               {"float64", at::kDouble},
                                                               {"float16", at::kHalf},
                                                               {"bfloat16", at::kBFloat16},
                                                               {"int64", at::kLong},
                                                               {"int32", at::kInt},
                                                               {"int16", at::kShort},
                                                               {"int8", at::kChar},
                                                               {"uint8", at::kByte},
                                                               {"bool", at::kBool},
                                                               {"complex64", at::kComplexFloat},
                                                               {"complex128", at::kComplexDouble}};
  const auto found = kNames.find(name);
  if (found == kNames.end())
    fail_package(path, fmt::format("opara/meta.json names an input dtype {} opara does not know", name));
  return found->second;
}

PackageInfo parse_info(const nlohmann::json& meta) {
  PackageInfo info;
  info.name = meta.at("name").get<std::string>();
  info.opara_version = meta.at("opara").get<std::string>();
  info.torch_version = meta.at("torch").get<std::string>();
  info.device = meta.at("device").get<std::string>();
  info.cuda_capability = meta.value("cuda_capability", "");
  info.cpu_isa = meta.value("cpu_isa", "");
  info.options = meta.at("options").get<std::map<std::string, std::string>>();
  info.regions = meta.at("regions").get<std::size_t>();
  for (const nlohmann::json& input : meta.at("inputs")) {
    info.input_signature.emplace_back(input.at("dtype").get<std::string>(),
                                      input.at("sizes").get<std::vector<std::int64_t>>());
  }
  info.holds_example_inputs = meta.value("example_inputs", true);
  info.folded_inputs = meta.value("folded_inputs", std::vector<std::int64_t>{});
  info.out_spec = meta.value("out_spec", "");
  return info;
}

}  // namespace

std::string choice_json(const StoredChoice& choice) {
  return nlohmann::json{{"machine", choice.machine}, {"options", choice.options}}.dump();
}

StoredChoice parse_choice(const std::string& json) {
  const nlohmann::json parsed = nlohmann::json::parse(json);
  return StoredChoice{parsed.at("machine").get<std::string>(),
                      parsed.at("options").get<std::map<std::string, std::string>>()};
}

std::string package_inputs_misfit(const PackageInfo& info, const std::vector<at::Tensor>& inputs) {
  if (inputs.size() != info.input_signature.size()) {
    return fmt::format("the package takes {} inputs, and {} were given", info.input_signature.size(), inputs.size());
  }
  for (std::size_t i = 0; i < inputs.size(); ++i) {
    const auto& [dtype, sizes] = info.input_signature[i];
    const std::string given = c10::toString(inputs[i].scalar_type());
    if (inputs[i].scalar_type() != dtype_named(dtype, "a package")) {
      return fmt::format("input {} is {}, and the package was made for {}", i, given, dtype);
    }
    if (inputs[i].sizes() != c10::IntArrayRef(sizes)) {
      return fmt::format("input {} has sizes [{}], and the package was made for [{}]", i,
                         fmt::join(inputs[i].sizes(), ", "), fmt::join(sizes, ", "));
    }
  }
  return "";
}

std::string package_region_record(std::int64_t key) {
  return fmt::format("opara/regions/{}.pt2", key);
}

PackageArchive::PackageArchive(std::string path) : path_(std::move(path)) {
  try {
    reader_ = std::make_unique<caffe2::serialize::PyTorchStreamReader>(path_);
  } catch (const std::exception& error) {
    fail_package(path_, fmt::format("not an opara package ({}): the file is damaged or truncated, or not one; make "
                                    "it again with opara.package",
                                    first_line(error)));
  }
  if (!reader_->hasRecord(kPackageMeta)) {
    fail_package(path_,
                 "not an opara package: it has no opara/meta.json (a torch.export or AOTInductor file loads "
                 "with opara.compile / opara::compile); make it with opara.package");
  }
  try {
    const nlohmann::json meta = nlohmann::json::parse(record(kPackageMeta));
    const int format = meta.at("format").get<int>();
    if (format != kPackageFormat) {
      fail_package(path_, fmt::format("a package of format {}, and this opara reads format {}: make it again with "
                                      "this opara's opara.package",
                                      format, kPackageFormat));
    }
    info_ = parse_info(meta);
    if (!info_.options.count("device")) {
      fail_package(path_, "opara/meta.json gives no device among its options: the package was edited; make it again");
    }
  } catch (const nlohmann::json::exception& error) {
    fail_package(path_, fmt::format("opara/meta.json is damaged ({}); make the package again", error.what()));
  }
  if (reader_->hasRecord(kPackageChoice)) {
    try {
      info_.choice = parse_choice(record(kPackageChoice));
    } catch (const nlohmann::json::exception& error) {
      fail_package(path_, fmt::format("{} is damaged ({}); make the package again", kPackageChoice, error.what()));
    }
  }
}

std::string PackageArchive::record(const std::string& name) const {
  if (!reader_->hasRecord(name)) {
    fail_package(path_, fmt::format("the package has no {}: it is incomplete or was edited; make it again with "
                                    "opara.package",
                                    name));
  }
  try {
    auto [data, size] = reader_->getRecord(name);
    return {static_cast<const char*>(data.get()), size};
  } catch (const std::exception& error) {
    fail_package(path_,
                 fmt::format("{} cannot be read ({}): the package is damaged; make it again", name, first_line(error)));
  }
}

std::vector<at::Tensor> PackageArchive::example_inputs() const {
  if (!info_.holds_example_inputs) {
    fail_package(path_,
                 "holds no example inputs (a compile cache entry, made for a caller's own tensors): pass the inputs "
                 "to load_package, or make a package with opara.package");
  }
  std::vector<at::Tensor> inputs;
  for (std::size_t i = 0; i < info_.input_signature.size(); ++i) {
    const auto& [dtype, sizes] = info_.input_signature[i];
    const std::string name = fmt::format("opara/inputs/{}.bin", i);
    const std::string bytes = record(name);
    at::Tensor tensor = at::empty(sizes, at::TensorOptions().dtype(dtype_named(dtype, path_)));
    if (static_cast<std::size_t>(tensor.nbytes()) != bytes.size()) {
      fail_package(path_,
                   fmt::format("{} holds {} bytes where its sizes need {}: the package is damaged; make it again", name,
                               bytes.size(), tensor.nbytes()));
    }
    std::memcpy(tensor.data_ptr(), bytes.data(), bytes.size());
    inputs.push_back(tensor);
  }
  return inputs;
}

}  // namespace opara
