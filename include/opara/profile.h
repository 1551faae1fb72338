#pragma once

// A model's recorded profile, as plain data: what CUPTI saw of each node's kernels on one GPU,
// the resource demand the occupancy calculator makes of them, host timings and bytes, and the
// device, versions, model file and input shapes it was made for. Saved as JSON, read back by
// costs_from_profile() to drive Alg. 2 on any machine, GPU or not. Nothing here needs torch or a
// GPU; the profiler that fills it is include/opara/model_profiler.h.

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "opara/export.h"
#include "opara/graph.h"
#include "opara/plan.h"

namespace opara {

struct Dim3 {
  std::int64_t x = 1;
  std::int64_t y = 1;
  std::int64_t z = 1;
  [[nodiscard]] std::int64_t volume() const { return x * y * z; }
  bool operator==(const Dim3& other) const { return x == other.x && y == other.y && z == other.z; }
};

// One kernel execution, as CUPTI's CONCURRENT_KERNEL activity record reports it.
struct OPARA_API KernelRecord {
  std::string name;
  Dim3 grid;
  Dim3 block;
  int registers_per_thread = 0;
  std::int64_t static_smem = 0;           // bytes per block
  std::int64_t dynamic_smem = 0;          // bytes per block
  std::int64_t local_mem_per_thread = 0;  // bytes
  std::uint64_t start_ns = 0;             // GPU timestamps
  std::uint64_t end_ns = 0;
  std::uint32_t stream = 0;          // CUPTI's stream id
  std::uint32_t correlation_id = 0;  // CUPTI's id of the API call that launched it

  [[nodiscard]] std::int64_t blocks() const { return grid.volume(); }
  [[nodiscard]] std::int64_t threads_per_block() const { return block.volume(); }
  [[nodiscard]] std::uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
  bool operator==(const KernelRecord& other) const;
};

// A memcpy or memset on the device (MEMCPY and MEMSET activity records): device work that is not a
// kernel, so a node doing only copies is not "silent".
struct OPARA_API CopyRecord {
  std::string kind;  // "memcpy HtoD", "memcpy DtoD", ..., "memset"
  std::uint64_t bytes = 0;
  std::uint64_t start_ns = 0;
  std::uint64_t end_ns = 0;
  std::uint32_t stream = 0;
  std::uint32_t correlation_id = 0;  // the driver API call that started it
  // The runtime API call (cudaMemcpyAsync) behind that driver call, 0 when none or unknown: a copy
  // is joined to a node through either.
  std::uint32_t runtime_correlation_id = 0;

  [[nodiscard]] std::uint64_t duration_ns() const { return end_ns > start_ns ? end_ns - start_ns : 0; }
  bool operator==(const CopyRecord& other) const;
};

// What the occupancy calculator needs to know of a GPU (cudaDeviceProp's fields of the same
// meaning). The allocation granularities of registers and shared memory are not stored: CUDA's
// calculator (cuda_occupancy.h) derives them from the compute capability, as the hardware does.
struct OPARA_API DeviceLimits {
  std::string name;  // "NVIDIA H200"
  int compute_major = 0;
  int compute_minor = 0;
  int sm_count = 0;
  int warp_size = 32;
  int max_threads_per_sm = 0;
  int max_threads_per_block = 0;
  int max_blocks_per_sm = 0;
  int registers_per_sm = 0;  // 32-bit registers
  int registers_per_block = 0;
  std::int64_t smem_per_sm = 0;  // bytes
  std::int64_t smem_per_block = 0;
  std::int64_t smem_per_block_optin = 0;
  std::int64_t reserved_smem_per_block = 0;
  bool operator==(const DeviceLimits& other) const;
};

// How much of the GPU a kernel, or a node's kernels, would hold. `demand` is what Alg. 2 sorts by.
struct ResourceDemand {
  double demand = 0;             // min(1, blocks / (resident blocks per SM x SMs))
  double thread_fraction = 0;    // of all SMs' thread slots, by the blocks resident at once
  double register_fraction = 0;  // of all SMs' registers (allocated, rounded to the granularity)
  double smem_fraction = 0;      // of all SMs' shared memory (allocated, reserved bytes included)
};

// One node of a profile.
struct NodeProfile {
  NodeId id = kNoNode;
  std::string kind;
  OpClass op_class = OpClass::kMemory;
  ResourceDemand demand;
  double gpu_ns = 0;           // median over the profiled runs of its kernels' and copies' durations
  double cpu_ns = 0;           // median host time of the node run on CPU copies of its inputs
  std::int64_t bytes_in = 0;   // every tensor argument, weights included
  std::int64_t bytes_out = 0;  // every tensor result
  std::optional<double> flops;
  bool expects_device_work = false;
  std::vector<KernelRecord> kernels;  // of the last profiled run
  std::vector<CopyRecord> copies;
};

struct ProfileInput {
  std::vector<std::int64_t> sizes;
  std::string dtype;  // c10's name: "Float", "Long", ...
  bool operator==(const ProfileInput& other) const { return sizes == other.sizes && dtype == other.dtype; }
};

inline constexpr int kProfileFormatVersion = 1;

struct Profile {
  DeviceLimits device;
  std::string torch_version;
  std::string cuda_runtime_version;
  std::string cuda_driver_version;
  std::string model_path;  // informational; the hash decides
  std::string model_hash;  // hash_model_file()
  // hash_graph_structure() of the graph profiled; empty in profiles written before it existed.
  std::string model_structure;
  std::vector<ProfileInput> inputs;
  int runs = 0;
  int warmup = 0;
  // "cupti": demands from kernel records; "static estimate": CUPTI was unavailable (see notes).
  std::string demand_source = "cupti";
  std::vector<std::string> notes;  // what the profiler wants a reader to know
  double h2d_bytes_per_s = 0;      // pinned host-to-device copies
  double d2h_bytes_per_s = 0;      // pinned device-to-host copies
  double eager_run_ms = 0;         // median of plain eager runs, before profiling
  double profiled_run_ms = 0;      // median of the profiled runs (CUPTI on, ids pushed)
  std::vector<NodeProfile> nodes;  // by node id
  std::vector<KernelRecord> unattributed_kernels;
  std::vector<CopyRecord> unattributed_copies;
  std::vector<NodeId> silent_nodes;
};

OPARA_API std::string to_json(const Profile& profile);
// Throws opara::Error naming `source` and the field on malformed JSON.
OPARA_API Profile profile_from_json(std::string_view json, const std::string& source = "profile");
OPARA_API void save_profile(const Profile& profile, const std::string& path);
OPARA_API Profile load_profile(const std::string& path);
// True when the JSON text is a full profile (with a header) rather than the minimal
// {"nodes": [{"id", "kind", "class", "demand"}]} form.
OPARA_API bool is_full_profile(std::string_view json);

// "fnv1a64:<16 hex digits>" of a file's bytes: tells model files apart (not adversaries). Throws
// opara::Error when the file cannot be read.
OPARA_API std::string hash_model_file(const std::string& path);
// The graph's structure (each node's kind, inputs and constant summary, with the weights' shapes;
// the graph's inputs and outputs), fingerprinted as hash_model_file is: what kernel timings depend
// on, and the same for a model exported again (a TorchScript file's bytes depend on the process that
// wrote it: its classes' mangled names, a random serialization id).
OPARA_API std::string hash_graph_structure(const Graph& graph);

// What a profile must have been made for; unset fields are not checked.
struct ProfileMatch {
  std::optional<std::string> model_hash;
  // With a profile that records one: a file of another hash fits when its structure is the same.
  std::optional<std::string> model_structure;
  std::optional<DeviceLimits> device;  // name, compute capability and SM count are compared
  std::optional<std::vector<ProfileInput>> inputs;
  bool allow_mismatch = false;  // warn instead of refusing
  // How the warning is given; empty: on standard error. LibTorch callers pass TORCH_WARN's, which
  // Python shows as a UserWarning (this header, like the layer that reads profiles, needs no torch).
  std::function<void(const std::string&)> warn;
};

// One line per difference ("device: the profile is of ... but ..."); empty when it matches.
OPARA_API std::vector<std::string> profile_mismatches(const Profile& profile, const ProfileMatch& match);
// Throws opara::Error naming `path` and each difference, or warns (`match.warn`) when
// `match.allow_mismatch`.
OPARA_API void require_profile_matches(const Profile& profile, const ProfileMatch& match, const std::string& path);

// Costs from a recorded profile: a full one (opara::Profile, written by the profiler; checked
// against `match` first, see require_profile_matches) or the minimal form {"nodes": [{"id",
// "kind", "class": "compute"|"memory", "demand"}...]}, which carries nothing to check. Throws
// opara::Error naming the file and the node when the profile does not belong to this graph.
OPARA_API std::vector<NodeCost> costs_from_profile(const Graph& graph, const std::string& path,
                                                   const ProfileMatch& match = {});

}  // namespace opara
