#pragma once

// Running a model cut into segments (overflow/segments.h) one segment after the other, each through
// a caller's runner: how tests check that a cut computes what the whole graph does.

#include <ATen/core/ivalue.h>

#include <cstddef>
#include <functional>
#include <vector>

#include "opara/graph.h"
#include "overflow/segments.h"

namespace opara {

// Runs the segment at `segment_index` on `inputs` (its input_values, in order) and returns its
// outputs (its output_values, in order). Called for every segment, graph and host alike: the
// runner looks at the segment's kind to choose how.
using SegmentRunner =
    std::function<std::vector<c10::IValue>(std::size_t segment_index, const std::vector<c10::IValue>& inputs)>;

// Runs `segments` one after the other on the calling thread, each through `runner`, routing values
// between them by ValueId and dropping each one after the last segment that reads it; returns the
// model's outputs in order. Throws opara::Error for a wrong input count (the eager message) or
// when the runner returns the wrong number of values.
std::vector<c10::IValue> run_segments(const Graph& graph, const std::vector<Segment>& segments,
                                      const std::vector<c10::IValue>& inputs, const SegmentRunner& runner);

}  // namespace opara
