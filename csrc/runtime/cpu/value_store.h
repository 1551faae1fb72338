#pragma once

#include <ATen/core/ivalue.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <vector>

#include "opara/graph.h"

namespace opara {

// The values of one CpuParallelExecutor run: a slot per graph value, each intermediate freed after
// its last reader, as the eager reference does.
//
// Note [Publication of values]
// Locking: none of its own. A slot is written once per run by the thread that runs its producer,
// and read by consumers ordered after the producer by one of: the scheduler's mutex (a node's event
// is recorded, and its stream handed on, under it after the node ran; the next node of a stream or
// of a waiting stream is taken under it), a no-stream node's done flag (no_stream_nodes.h), or the
// end-of-run handshake with the calling thread. A slot is cleared (the value freed) by the consumer
// that decrements its atomic count of readers to zero (acq_rel): every other reader decremented
// after copying it out, so the clear comes after every read. Graph inputs and outputs are never
// cleared during a run. start_run(), take_outputs() and clear() belong to the calling thread of
// run(), while no worker runs.
class ValueStore {
 public:
  explicit ValueStore(const Graph& graph);

  // A slot per value, every count of readers full, and the graph's inputs placed (tensors on the
  // CPU). `inputs` has one per graph input.
  void start_run(const std::vector<c10::IValue>& inputs);

  // Pushes node's inputs onto `stack`, in order.
  void push_inputs(const Node& node, std::vector<c10::IValue>& stack) const {
    for (ValueId input : node.inputs) stack.push_back(slots_[input]);
  }
  // The node ran and left its outputs in `stack`: publishes them (an output nobody reads is
  // dropped at once), empties `stack` and frees what the node read for the last time.
  void publish(const Node& node, std::vector<c10::IValue>& stack);

  // The graph's outputs; every slot is emptied (no tensor is held between runs).
  std::vector<c10::IValue> take_outputs();
  void clear() { slots_.clear(); }

 private:
  const Graph& graph_;
  std::vector<std::size_t> reader_count_;  // by ValueId: distinct nodes that read it
  // By ValueId: graph inputs and outputs, which the run holds until its end.
  std::vector<std::uint8_t> held_whole_run_;
  std::vector<c10::IValue> slots_;                            // by ValueId
  std::unique_ptr<std::atomic<std::size_t>[]> readers_left_;  // by ValueId
};

}  // namespace opara
