#include "tools/run_segments.h"

#include <fmt/format.h>

#include "graph/graph_analysis.h"
#include "opara/error.h"

namespace opara {

std::vector<c10::IValue> run_segments(const Graph& graph, const std::vector<Segment>& segments,
                                      const std::vector<c10::IValue>& inputs, const SegmentRunner& runner) {
  if (inputs.size() != graph.inputs().size()) {
    std::string names;
    for (ValueId input : graph.inputs()) names += (names.empty() ? "" : ", ") + graph.value(input).name;
    throw Error(fmt::format("{}: the model takes {} inputs ({}), {} were given", graph.source_path,
                            graph.inputs().size(), names, inputs.size()));
  }
  std::vector<c10::IValue> values(graph.values().size());
  // Segments still to read each value; a value is dropped after its last reader unless returned.
  std::vector<std::size_t> reads_left(graph.values().size(), 0);
  for (const Segment& segment : segments) {
    for (ValueId input : segment.input_values) ++reads_left[input];
  }
  const std::vector<bool> is_output = model_output_mask(graph);
  for (std::size_t i = 0; i < inputs.size(); ++i) values[graph.inputs()[i]] = inputs[i];

  for (std::size_t s = 0; s < segments.size(); ++s) {
    const Segment& segment = segments[s];
    std::vector<c10::IValue> segment_inputs;
    segment_inputs.reserve(segment.input_values.size());
    for (ValueId input : segment.input_values) {
      segment_inputs.push_back(values[input]);
      if (--reads_left[input] == 0 && !is_output[input]) values[input] = c10::IValue();
    }
    std::vector<c10::IValue> segment_outputs = runner(s, segment_inputs);
    if (segment_outputs.size() != segment.output_values.size()) {
      throw Error(fmt::format("{}: the runner of {} segment {} returned {} values where the segment has {} outputs",
                              graph.source_path, to_string(segment.kind), s, segment_outputs.size(),
                              segment.output_values.size()));
    }
    for (std::size_t k = 0; k < segment_outputs.size(); ++k) {
      values[segment.output_values[k]] = std::move(segment_outputs[k]);
    }
  }

  std::vector<c10::IValue> outputs;
  outputs.reserve(graph.outputs().size());
  for (ValueId output : graph.outputs()) outputs.push_back(values[output]);
  return outputs;
}

}  // namespace opara
