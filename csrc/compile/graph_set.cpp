#include "opara/graph_set.h"

#include <ATen/ATen.h>

#include <mutex>

#include "compile/graph_set_state.h"

namespace opara {

std::vector<at::Tensor> GraphSet::State::run_bucket(std::size_t bucket, const std::vector<at::Tensor>& inputs) {
  // A bucket's run takes the turn of the pool it shares (CompiledModel::run).
  std::vector<at::Tensor> outputs = buckets[bucket].run(inputs);
  const std::lock_guard<std::mutex> lock(counters_mutex);
  ++counters.bucket_runs[bucket];
  return outputs;
}

std::vector<at::Tensor> GraphSet::run(const std::vector<at::Tensor>& inputs) const {
  State& state = *state_;
  const std::int64_t rows = state.signature->check(inputs);
  const std::int64_t largest = state.batch_sizes.back();
  std::vector<std::vector<at::Tensor>> pieces;
  std::int64_t padded = 0;
  for (std::int64_t start = 0; start < rows; start += largest) {
    const std::int64_t count = std::min(largest, rows - start);
    const std::size_t bucket = state.bucket_for(count);
    const std::int64_t size = state.batch_sizes[bucket];
    padded += size - count;
    std::vector<at::Tensor> piece = inputs;
    for (int index : state.batched_inputs) piece[index] = inputs[index].narrow(0, start, count);
    piece = inputs_with_rows(piece, state.batched_inputs, size);
    std::vector<at::Tensor> outputs = state.run_bucket(bucket, piece);
    for (at::Tensor& output : outputs) output = output.narrow(0, 0, count);
    pieces.push_back(std::move(outputs));
  }
  {
    const std::lock_guard<std::mutex> lock(state.counters_mutex);
    ++state.counters.calls;
    state.counters.rows += static_cast<std::size_t>(rows);
    state.counters.padded_rows += static_cast<std::size_t>(padded);
    state.counters.split_calls += pieces.size() > 1 ? 1 : 0;
  }
  if (pieces.size() == 1) return std::move(pieces.front());
  std::vector<at::Tensor> joined;
  for (std::size_t k = 0; k < pieces.front().size(); ++k) {
    std::vector<at::Tensor> parts;
    for (const auto& piece : pieces) parts.push_back(piece[k]);
    joined.push_back(at::cat(parts));
  }
  return joined;
}

std::int64_t GraphSet::check(const std::vector<at::Tensor>& inputs) const {
  return state_->signature->check(inputs);
}

const std::vector<std::int64_t>& GraphSet::batch_sizes() const {
  return state_->batch_sizes;
}

const std::vector<int>& GraphSet::batched_inputs() const {
  return state_->batched_inputs;
}

const CompiledModel& GraphSet::bucket(std::size_t index) const {
  return state_->buckets.at(index);
}

GraphSetStats GraphSet::stats() const {
  GraphSetStats stats;
  {
    const std::lock_guard<std::mutex> lock(state_->counters_mutex);
    stats = state_->counters;
  }
  stats.buckets.clear();
  stats.pool_bytes = 0;
  for (const CompiledModel& bucket : state_->buckets) {
    stats.buckets.push_back(bucket.stats());
    stats.pool_bytes += stats.buckets.back().pool_bytes;
  }
  return stats;
}

}  // namespace opara
