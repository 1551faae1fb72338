#pragma once

// A program's graph with regions compiled by another compiler (Inductor) as nodes: the one plan
// that cut the regions is the plan that runs them.

#include <ATen/core/Tensor.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "opara/export.h"
#include "opara/graph.h"

namespace opara {

// `graph` with each compiled region one node, from the description the Python package's lowering
// writes (python/opara/_regions.py):
//   {"plan": the plan that cut the regions (to_json(graph, plan), with region_of),
//    "regions": [{"region": r, "op": "opara::native_region" or "opara::region", "key": k,
//                 "inputs": [{"value": name} or {"constant": i}, ...], "outputs": [name, ...]}, ...]}
// A listed region becomes one node calling op(key, inputs), whose outputs take the names given;
// `constants[i]` is the tensor an input {"constant": i} names (a weight the region reads without
// folding it in). The regions not listed, and the nodes outside regions, stay as they are; the
// kernel-free nodes only the regions read go. A region that writes state in place (a member with
// kWritesInput: a KV cache's new row) writes it where it lives and gives it not out: after its node
// an "opara::written_in_region" node, which launches nothing and writes its input, hands the state
// on as the value the write made. Every kernel node keeps the plan's stream
// (Node::planned_stream), so that compiling the result plans those streams, and the nodes come in
// the plan's launch order. Throws opara::Error naming graph.source_path and the region where the
// description does not fit the graph.
OPARA_API Graph with_compiled_regions(const Graph& graph, std::string_view description,
                                      const std::vector<at::Tensor>& constants);

// with_compiled_regions with runners the caller made itself, by key: a region whose description
// names op "opara::aoti_region" becomes a node of that kind running `region_ops.at(key)`, which takes the
// region's inputs in order (no constants) and gives its outputs (a package's AOTInductor regions,
// opara::load_package). A key with no runner is refused, naming the region.
using RegionOps = std::unordered_map<std::int64_t, std::shared_ptr<const NodeOp>>;
OPARA_API Graph with_region_runners(const Graph& graph, std::string_view description, const RegionOps& region_ops);

}  // namespace opara
