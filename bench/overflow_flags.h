#pragma once

// --overflow, --alpha-us and --cpu-nodes: the same flags on `plan` and `run`, filling the
// OverflowOptions that compile() takes.

#include <CLI/CLI.hpp>

#include <string>
#include <vector>

#include "number_checks.h"
#include "opara/options.h"

namespace opara::bench {

struct OverflowFlags {
  CLI::Option* policy;
  CLI::Option* alpha_us;
  CLI::Option* cpu_nodes;
};

// Adds the three flags to `command`, the policy by the names to_string(OverflowPolicy) gives;
// returns them, for the command's own checks.
inline OverflowFlags add_overflow_flags(CLI::App* command, OverflowOptions& overflow, const std::string& policy_help) {
  std::vector<std::string> names;
  for (const OverflowPolicy policy : {OverflowPolicy::kNone, OverflowPolicy::kCommSd, OverflowPolicy::kManual}) {
    names.emplace_back(to_string(policy));
  }
  OverflowFlags flags;
  flags.policy =
      command
          ->add_option_function<std::string>(
              "--overflow", [&overflow](const std::string& name) { overflow.policy = parse_overflow_policy(name); },
              policy_help)
          ->check(CLI::IsMember(names));
  flags.alpha_us = command
                       ->add_option("--alpha-us", overflow.alpha_us,
                                    "Comm+SD: how much slower (us) a node may get on the CPU and still move (default "
                                    "100)")
                       ->check(kNonNegative);
  flags.cpu_nodes =
      command
          ->add_option("--cpu-nodes", overflow.cpu_nodes,
                       "manual: node ids or kinds for the CPU, comma-separated, or a .json file {\"cpu\": [...]}")
          ->delimiter(',');
  return flags;
}

// What compile() would refuse, said in the flags' words: comm_sd compares the GPU and CPU times of
// a full profile, manual needs its nodes, and nodes go only with manual.
inline void check_overflow_flags(const OverflowOptions& overflow, const std::string& profile) {
  if (overflow.policy == OverflowPolicy::kCommSd && profile.empty()) {
    throw CLI::ValidationError("--overflow comm_sd",
                               "needs --profile P: a full profile (opara-bench profile --model M --out P) has the "
                               "GPU and CPU times Comm+SD compares; or name the nodes with --overflow manual "
                               "--cpu-nodes");
  }
  if (overflow.policy == OverflowPolicy::kManual && overflow.cpu_nodes.empty()) {
    throw CLI::ValidationError("--overflow manual", "needs --cpu-nodes: the node ids or kinds to run on the CPU");
  }
  if (overflow.policy != OverflowPolicy::kManual && !overflow.cpu_nodes.empty()) {
    throw CLI::ValidationError("--cpu-nodes", "only goes with --overflow manual");
  }
}

}  // namespace opara::bench
