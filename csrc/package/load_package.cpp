// opara::load_package: a package's program with its AOTInductor regions as nodes, compiled for
// the example inputs it holds (package.h).
#include <ATen/cpu/Utils.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <nlohmann/json.hpp>

#include "opara/compiled_regions.h"
#include "opara/error.h"
#include "opara/load.h"
#include "opara/package.h"
#include "opara/version.h"
#include "package/aoti_region_op.h"
#include "package/package_archive.h"
#include "package/package_fits.h"
#include "profiler/device_limits.h"
#include "runtime/cpu/cpu_parallel_executor.h"

namespace opara {
namespace {

PackageHost this_host() {
  PackageHost host;
  const VersionInfo versions = version();
  host.opara_version = versions.opara;
  host.torch_version = versions.torch_running;
  host.has_cuda = torch::cuda::is_available();
  if (host.has_cuda) {
    const DeviceLimits limits = device_limits(0);
    host.cuda_capability = fmt::format("{}.{}", limits.compute_major, limits.compute_minor);
  }
  for (const auto& [name, value] : at::cpu::get_cpu_capabilities()) {
    if (value.isBool() && value.toBool()) host.cpu_flags.push_back(name);
  }
  return host;
}

const PackageArchive& fitting(const PackageArchive& archive) {
  const std::string misfit = package_misfit(archive.info(), this_host());
  if (!misfit.empty()) throw Error(fmt::format("{}: {}", archive.path(), misfit));
  return archive;
}

// The regions' runners, by the key the description gives each (its record's number).
RegionOps region_runners(const PackageArchive& archive, const nlohmann::json& description, c10::Device device) {
  RegionOps runners;
  for (const nlohmann::json& region : description.at("regions")) {
    const std::int64_t key = region.at("key").get<std::int64_t>();
    const std::string record = package_region_record(key);
    runners[key] =
        std::make_shared<AotiRegionOp>(archive.record(record), device, fmt::format("{}: {}", archive.path(), record));
  }
  return runners;
}

}  // namespace

PackageInfo read_package_info(const std::string& path) {
  return PackageArchive(path).info();
}

std::vector<at::Tensor> package_example_inputs(const std::string& path) {
  return PackageArchive(path).example_inputs();
}

namespace {

CompiledModel load_package_for(const std::string& path, const std::vector<at::Tensor>* inputs,
                               const std::map<std::string, std::string>& options) {
  const PackageArchive archive(path);
  const PackageInfo& info = fitting(archive).info();
  std::map<std::string, std::string> text = info.options;
  for (const auto& [key, value] : options) {
    if (key == "device" && value != info.options.at("device")) {
      throw Error(
          fmt::format("{}: made for device {}, and its regions run there only; make a package for {} with "
                      "opara.package",
                      path, info.options.at("device"), value));
    }
    text[key] = value;
  }
  const c10::Device device(info.options.at("device"));
  if (stored_choice_misfit(info, options, schedule_machine(device)).empty()) {
    for (const auto& [key, value] : info.choice.options) text[key] = value;
  }
  const Options compile_options = options_from_text(text);
  // Loaded for a caller's own inputs (a compile cache entry), its messages name the model as the
  // caller knows it; else the file.
  Graph graph = load_archive(archive.record(kPackageProgram), inputs != nullptr ? info.name : path);
  if (info.regions > 0) {
    const std::string description = archive.record(kPackageRegions);
    nlohmann::json parsed;
    try {
      parsed = nlohmann::json::parse(description);
    } catch (const nlohmann::json::exception& error) {
      throw Error(fmt::format("{}: {} is damaged ({}); make the package again", path, kPackageRegions, error.what()));
    }
    graph = with_region_runners(graph, description, region_runners(archive, parsed, device));
  }
  if (inputs == nullptr) return compile(graph, archive.example_inputs(), compile_options);
  const std::string misfit = package_inputs_misfit(info, *inputs);
  if (!misfit.empty()) throw Error(fmt::format("{}: {}", path, misfit));
  return compile(graph, *inputs, compile_options);
}

}  // namespace

std::string schedule_machine(const c10::Device& device) {
  if (!device.is_cuda()) return fmt::format("{} CPUs", usable_cores());
  const DeviceLimits limits = device_limits(device.index());
  return fmt::format("{}, {} SMs", limits.name, limits.sm_count);
}

std::string schedule_choice_record(const CompiledModel& model) {
  const CompiledStats stats = model.stats();
  std::map<std::string, std::string> chosen = chosen_schedule_options(stats);
  if (chosen.empty()) return "";
  return choice_json(StoredChoice{schedule_machine(c10::Device(stats.device)), std::move(chosen)});
}

CompiledModel load_package(const std::string& path, const std::map<std::string, std::string>& options) {
  return load_package_for(path, nullptr, options);
}

CompiledModel load_package(const std::string& path, const std::vector<at::Tensor>& inputs,
                           const std::map<std::string, std::string>& options) {
  return load_package_for(path, &inputs, options);
}

}  // namespace opara
