// opara::Profile as JSON. The node entries keep the fields of the minimal profile form
// ({"id", "kind", "class", "demand"}) so that both forms read the same way; the rest is a header
// saying what the profile was made for and the records behind each demand.
#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <sstream>
#include <utility>

#include "opara/error.h"
#include "opara/profile.h"
#include "support/text_file.h"

namespace opara {
namespace {

using nlohmann::json;

constexpr std::string_view kFormatName = "opara-profile";

json dim3_json(const Dim3& dim) {
  return json::array({dim.x, dim.y, dim.z});
}

Dim3 dim3_from(const json& value) {
  if (!value.is_array() || value.size() != 3) throw Error("a grid or block is [x, y, z]");
  return Dim3{value[0].get<std::int64_t>(), value[1].get<std::int64_t>(), value[2].get<std::int64_t>()};
}

json kernel_json(const KernelRecord& kernel) {
  return {{"name", kernel.name},
          {"grid", dim3_json(kernel.grid)},
          {"block", dim3_json(kernel.block)},
          {"registers_per_thread", kernel.registers_per_thread},
          {"static_smem", kernel.static_smem},
          {"dynamic_smem", kernel.dynamic_smem},
          {"local_mem_per_thread", kernel.local_mem_per_thread},
          {"start_ns", kernel.start_ns},
          {"end_ns", kernel.end_ns},
          {"stream", kernel.stream},
          {"correlation_id", kernel.correlation_id}};
}

KernelRecord kernel_from(const json& value) {
  KernelRecord kernel;
  kernel.name = value.at("name").get<std::string>();
  kernel.grid = dim3_from(value.at("grid"));
  kernel.block = dim3_from(value.at("block"));
  kernel.registers_per_thread = value.at("registers_per_thread").get<int>();
  kernel.static_smem = value.at("static_smem").get<std::int64_t>();
  kernel.dynamic_smem = value.at("dynamic_smem").get<std::int64_t>();
  kernel.local_mem_per_thread = value.value("local_mem_per_thread", std::int64_t{0});
  kernel.start_ns = value.at("start_ns").get<std::uint64_t>();
  kernel.end_ns = value.at("end_ns").get<std::uint64_t>();
  kernel.stream = value.value("stream", std::uint32_t{0});
  kernel.correlation_id = value.value("correlation_id", std::uint32_t{0});
  return kernel;
}

json copy_json(const CopyRecord& copy) {
  return {{"kind", copy.kind},
          {"bytes", copy.bytes},
          {"start_ns", copy.start_ns},
          {"end_ns", copy.end_ns},
          {"stream", copy.stream},
          {"correlation_id", copy.correlation_id},
          {"runtime_correlation_id", copy.runtime_correlation_id}};
}

CopyRecord copy_from(const json& value) {
  CopyRecord copy;
  copy.kind = value.at("kind").get<std::string>();
  copy.bytes = value.at("bytes").get<std::uint64_t>();
  copy.start_ns = value.at("start_ns").get<std::uint64_t>();
  copy.end_ns = value.at("end_ns").get<std::uint64_t>();
  copy.stream = value.value("stream", std::uint32_t{0});
  copy.correlation_id = value.value("correlation_id", std::uint32_t{0});
  copy.runtime_correlation_id = value.value("runtime_correlation_id", std::uint32_t{0});
  return copy;
}

json device_json(const DeviceLimits& device) {
  return {{"name", device.name},
          {"compute_major", device.compute_major},
          {"compute_minor", device.compute_minor},
          {"sm_count", device.sm_count},
          {"warp_size", device.warp_size},
          {"max_threads_per_sm", device.max_threads_per_sm},
          {"max_threads_per_block", device.max_threads_per_block},
          {"max_blocks_per_sm", device.max_blocks_per_sm},
          {"registers_per_sm", device.registers_per_sm},
          {"registers_per_block", device.registers_per_block},
          {"smem_per_sm", device.smem_per_sm},
          {"smem_per_block", device.smem_per_block},
          {"smem_per_block_optin", device.smem_per_block_optin},
          {"reserved_smem_per_block", device.reserved_smem_per_block}};
}

DeviceLimits device_from(const json& value) {
  DeviceLimits device;
  device.name = value.at("name").get<std::string>();
  device.compute_major = value.at("compute_major").get<int>();
  device.compute_minor = value.at("compute_minor").get<int>();
  device.sm_count = value.at("sm_count").get<int>();
  device.warp_size = value.at("warp_size").get<int>();
  device.max_threads_per_sm = value.at("max_threads_per_sm").get<int>();
  device.max_threads_per_block = value.at("max_threads_per_block").get<int>();
  device.max_blocks_per_sm = value.at("max_blocks_per_sm").get<int>();
  device.registers_per_sm = value.at("registers_per_sm").get<int>();
  device.registers_per_block = value.at("registers_per_block").get<int>();
  device.smem_per_sm = value.at("smem_per_sm").get<std::int64_t>();
  device.smem_per_block = value.at("smem_per_block").get<std::int64_t>();
  device.smem_per_block_optin = value.at("smem_per_block_optin").get<std::int64_t>();
  device.reserved_smem_per_block = value.at("reserved_smem_per_block").get<std::int64_t>();
  return device;
}

OpClass op_class_from(const json& value, NodeId id) {
  const auto text = value.get<std::string>();
  if (text == "compute") return OpClass::kCompute;
  if (text == "memory") return OpClass::kMemory;
  throw Error(fmt::format("node {} has class '{}'; expected compute or memory", id, text));
}

json node_json(const NodeProfile& node) {
  json kernels = json::array();
  for (const KernelRecord& kernel : node.kernels) kernels.push_back(kernel_json(kernel));
  json copies = json::array();
  for (const CopyRecord& copy : node.copies) copies.push_back(copy_json(copy));
  return {{"id", node.id},
          {"kind", node.kind},
          {"class", to_string(node.op_class)},
          {"demand", node.demand.demand},
          {"thread_fraction", node.demand.thread_fraction},
          {"register_fraction", node.demand.register_fraction},
          {"smem_fraction", node.demand.smem_fraction},
          {"gpu_ns", node.gpu_ns},
          {"cpu_ns", node.cpu_ns},
          {"bytes_in", node.bytes_in},
          {"bytes_out", node.bytes_out},
          {"flops", node.flops ? json(*node.flops) : json(nullptr)},
          {"expects_device_work", node.expects_device_work},
          {"kernels", kernels},
          {"copies", copies}};
}

NodeProfile node_from(const json& value) {
  NodeProfile node;
  node.id = value.at("id").get<NodeId>();
  node.kind = value.at("kind").get<std::string>();
  node.op_class = op_class_from(value.at("class"), node.id);
  node.demand.demand = value.at("demand").get<double>();
  node.demand.thread_fraction = value.at("thread_fraction").get<double>();
  node.demand.register_fraction = value.at("register_fraction").get<double>();
  node.demand.smem_fraction = value.at("smem_fraction").get<double>();
  node.gpu_ns = value.at("gpu_ns").get<double>();
  node.cpu_ns = value.at("cpu_ns").get<double>();
  node.bytes_in = value.at("bytes_in").get<std::int64_t>();
  node.bytes_out = value.at("bytes_out").get<std::int64_t>();
  if (!value.at("flops").is_null()) node.flops = value.at("flops").get<double>();
  node.expects_device_work = value.at("expects_device_work").get<bool>();
  for (const json& kernel : value.at("kernels")) node.kernels.push_back(kernel_from(kernel));
  for (const json& copy : value.at("copies")) node.copies.push_back(copy_from(copy));
  return node;
}

json profile_json(const Profile& profile) {
  json inputs = json::array();
  for (const ProfileInput& input : profile.inputs) inputs.push_back({{"sizes", input.sizes}, {"dtype", input.dtype}});
  json nodes = json::array();
  for (const NodeProfile& node : profile.nodes) nodes.push_back(node_json(node));
  json unattributed_kernels = json::array();
  for (const KernelRecord& kernel : profile.unattributed_kernels) unattributed_kernels.push_back(kernel_json(kernel));
  json unattributed_copies = json::array();
  for (const CopyRecord& copy : profile.unattributed_copies) unattributed_copies.push_back(copy_json(copy));
  return {
      {"format", kFormatName},
      {"version", kProfileFormatVersion},
      {"device", device_json(profile.device)},
      {"torch_version", profile.torch_version},
      {"cuda_runtime_version", profile.cuda_runtime_version},
      {"cuda_driver_version", profile.cuda_driver_version},
      {"model", {{"path", profile.model_path}, {"hash", profile.model_hash}, {"structure", profile.model_structure}}},
      {"inputs", inputs},
      {"runs", profile.runs},
      {"warmup", profile.warmup},
      {"demand_source", profile.demand_source},
      {"notes", profile.notes},
      {"copy_bandwidth", {{"h2d_bytes_per_s", profile.h2d_bytes_per_s}, {"d2h_bytes_per_s", profile.d2h_bytes_per_s}}},
      {"timing",
       {{"eager_run_ms", profile.eager_run_ms},
        {"profiled_run_ms", profile.profiled_run_ms},
        // None without profiled runs (CUPTI was unavailable).
        {"overhead_ms",
         profile.profiled_run_ms > 0 ? json(profile.profiled_run_ms - profile.eager_run_ms) : json(nullptr)}}},
      {"nodes", nodes},
      {"unattributed_kernels", unattributed_kernels},
      {"unattributed_copies", unattributed_copies},
      {"silent_nodes", profile.silent_nodes}};
}

// A figure a profile measured or derived: finite, not negative, and at most `most`.
void check_figure(double figure, const std::string& where, const char* name,
                  double most = std::numeric_limits<double>::max()) {
  if (!std::isfinite(figure) || figure < 0 || figure > most) {
    throw Error(fmt::format("{}: {} is {}, not a figure between 0 and {}; profile again", where, name, figure, most));
  }
}

// What the planners divide by or sum up must be sane: a hand-edited or damaged file fails here,
// naming the field, rather than giving plans from negative times or zero SMs.
void check_figures(const Profile& profile) {
  const DeviceLimits& device = profile.device;
  for (const auto& [name, limit] : {std::pair{"sm_count", device.sm_count},
                                    {"warp_size", device.warp_size},
                                    {"max_threads_per_sm", device.max_threads_per_sm},
                                    {"max_blocks_per_sm", device.max_blocks_per_sm}}) {
    if (limit <= 0) throw Error(fmt::format("device: {} is {}; profile again", name, limit));
  }
  check_figure(profile.h2d_bytes_per_s, "copy_bandwidth", "h2d_bytes_per_s");
  check_figure(profile.d2h_bytes_per_s, "copy_bandwidth", "d2h_bytes_per_s");
  check_figure(profile.eager_run_ms, "timing", "eager_run_ms");
  check_figure(profile.profiled_run_ms, "timing", "profiled_run_ms");
  for (const NodeProfile& node : profile.nodes) {
    const std::string where = fmt::format("node {}", node.id);
    // A static estimate's demand is on its own scale (only comparisons matter); CUPTI's is a share.
    check_figure(node.demand.demand, where, "demand",
                 profile.demand_source == "cupti" ? 1.0 : std::numeric_limits<double>::max());
    check_figure(node.demand.thread_fraction, where, "thread_fraction", 1);
    check_figure(node.demand.register_fraction, where, "register_fraction", 1);
    check_figure(node.demand.smem_fraction, where, "smem_fraction", 1);
    check_figure(node.gpu_ns, where, "gpu_ns");
    check_figure(node.cpu_ns, where, "cpu_ns");
    check_figure(static_cast<double>(node.bytes_in), where, "bytes_in");
    check_figure(static_cast<double>(node.bytes_out), where, "bytes_out");
    if (node.flops) check_figure(*node.flops, where, "flops");
  }
  for (NodeId id : profile.silent_nodes) {
    if (id < 0 || id >= static_cast<NodeId>(profile.nodes.size())) {
      throw Error(fmt::format("silent_nodes names node {}, and the profile has nodes 0 to {}", id,
                              static_cast<int>(profile.nodes.size()) - 1));
    }
  }
}

Profile profile_from(const json& value) {
  if (value.value("format", std::string()) != kFormatName) {
    throw Error(fmt::format("\"format\" is not \"{}\"", kFormatName));
  }
  const int version = value.at("version").get<int>();
  if (version < 1) throw Error(fmt::format("version {} is not a profile format version (they start at 1)", version));
  if (version > kProfileFormatVersion) {
    throw Error(fmt::format("version {} was written by a newer opara (this one reads up to {}); profile again", version,
                            kProfileFormatVersion));
  }
  Profile profile;
  profile.device = device_from(value.at("device"));
  profile.torch_version = value.at("torch_version").get<std::string>();
  profile.cuda_runtime_version = value.at("cuda_runtime_version").get<std::string>();
  profile.cuda_driver_version = value.at("cuda_driver_version").get<std::string>();
  profile.model_path = value.at("model").at("path").get<std::string>();
  profile.model_hash = value.at("model").at("hash").get<std::string>();
  profile.model_structure = value.at("model").value("structure", "");
  for (const json& input : value.at("inputs")) {
    profile.inputs.push_back(
        ProfileInput{input.at("sizes").get<std::vector<std::int64_t>>(), input.at("dtype").get<std::string>()});
  }
  profile.runs = value.at("runs").get<int>();
  profile.warmup = value.at("warmup").get<int>();
  profile.demand_source = value.at("demand_source").get<std::string>();
  profile.notes = value.at("notes").get<std::vector<std::string>>();
  profile.h2d_bytes_per_s = value.at("copy_bandwidth").at("h2d_bytes_per_s").get<double>();
  profile.d2h_bytes_per_s = value.at("copy_bandwidth").at("d2h_bytes_per_s").get<double>();
  profile.eager_run_ms = value.at("timing").at("eager_run_ms").get<double>();
  profile.profiled_run_ms = value.at("timing").at("profiled_run_ms").get<double>();
  for (const json& node : value.at("nodes")) {
    profile.nodes.push_back(node_from(node));
    const NodeId expected = static_cast<NodeId>(profile.nodes.size()) - 1;
    if (profile.nodes.back().id != expected) {
      throw Error(fmt::format("node entry {} has id {}: a profile lists every node, in id order", expected,
                              profile.nodes.back().id));
    }
  }
  for (const json& kernel : value.at("unattributed_kernels"))
    profile.unattributed_kernels.push_back(kernel_from(kernel));
  for (const json& copy : value.at("unattributed_copies")) profile.unattributed_copies.push_back(copy_from(copy));
  profile.silent_nodes = value.at("silent_nodes").get<std::vector<NodeId>>();
  check_figures(profile);
  return profile;
}

}  // namespace

bool KernelRecord::operator==(const KernelRecord& other) const {
  return name == other.name && grid == other.grid && block == other.block &&
         registers_per_thread == other.registers_per_thread && static_smem == other.static_smem &&
         dynamic_smem == other.dynamic_smem && local_mem_per_thread == other.local_mem_per_thread &&
         start_ns == other.start_ns && end_ns == other.end_ns && stream == other.stream &&
         correlation_id == other.correlation_id;
}

bool CopyRecord::operator==(const CopyRecord& other) const {
  return kind == other.kind && bytes == other.bytes && start_ns == other.start_ns && end_ns == other.end_ns &&
         stream == other.stream && correlation_id == other.correlation_id &&
         runtime_correlation_id == other.runtime_correlation_id;
}

bool DeviceLimits::operator==(const DeviceLimits& other) const {
  return device_json(*this) == device_json(other);
}

std::string to_json(const Profile& profile) {
  return profile_json(profile).dump(1);
}

Profile profile_from_json(std::string_view text, const std::string& source) {
  try {
    return profile_from(json::parse(text));
  } catch (const std::exception& error) {
    throw Error(fmt::format("{}: not a valid opara profile: {}", source, error.what()));
  }
}

bool is_full_profile(std::string_view text) {
  const json value = json::parse(text, nullptr, /*allow_exceptions=*/false);
  return value.is_object() && value.contains("format");
}

void save_profile(const Profile& profile, const std::string& path) {
  write_text_file(path, to_json(profile) + "\n", "the profile");
}

Profile load_profile(const std::string& path) {
  std::ifstream file(path);
  if (!file) throw Error(fmt::format("{}: cannot open the profile", path));
  std::stringstream text;
  text << file.rdbuf();
  return profile_from_json(text.str(), path);
}

}  // namespace opara
