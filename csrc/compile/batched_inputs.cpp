// A graph set's batch sizes, which inputs carry the batch, and those inputs at another number of rows.
#include <ATen/ATen.h>
#include <fmt/format.h>

#include <algorithm>

#include "exec/shape_text.h"
#include "opara/error.h"
#include "opara/graph_set.h"

namespace opara {
namespace {

std::vector<int> declared_batched_inputs(std::vector<int> batched, std::size_t input_count, const std::string& source) {
  std::sort(batched.begin(), batched.end());
  batched.erase(std::unique(batched.begin(), batched.end()), batched.end());
  for (int index : batched) {
    if (index < 0 || static_cast<std::size_t>(index) >= input_count) {
      throw Error(
          fmt::format("{}: batched input {} does not exist; the model takes {} inputs", source, index, input_count));
    }
  }
  return batched;
}

std::vector<int> inferred_batched_inputs(const std::vector<at::Tensor>& examples) {
  std::vector<int> batched;
  if (examples.empty() || !examples[0].defined() || examples[0].dim() == 0) return batched;
  for (std::size_t i = 0; i < examples.size(); ++i) {
    if (examples[i].defined() && examples[i].dim() >= 1 && examples[i].size(0) == examples[0].size(0)) {
      batched.push_back(static_cast<int>(i));
    }
  }
  return batched;
}

// `tensor`'s first `rows` rows, or all of them and copies of the last one up to `rows`.
at::Tensor with_rows(const at::Tensor& tensor, std::int64_t rows) {
  const std::int64_t have = tensor.size(0);
  if (rows <= have) return tensor.narrow(0, 0, rows);
  std::vector<std::int64_t> padding = tensor.sizes().vec();
  padding[0] = rows - have;
  return at::cat({tensor, tensor.narrow(0, have - 1, 1).expand(padding)});
}

}  // namespace

std::vector<std::int64_t> checked_batch_sizes(std::vector<std::int64_t> sizes, const std::string& source) {
  std::sort(sizes.begin(), sizes.end());
  sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
  if (sizes.empty()) throw Error(fmt::format("{}: a graph set needs at least one batch size", source));
  if (sizes.front() < 1) {
    throw Error(fmt::format("{}: batch size {} is not a positive number of rows", source, sizes.front()));
  }
  return sizes;
}

std::vector<int> find_batched_inputs(const std::vector<at::Tensor>& examples,
                                     const std::optional<std::vector<int>>& declared, const std::string& source) {
  const std::vector<int> batched =
      declared ? declared_batched_inputs(*declared, examples.size(), source) : inferred_batched_inputs(examples);
  if (batched.empty()) {
    throw Error(
        fmt::format("{}: no input is batched: declare which inputs' first dimension is the batch "
                    "(GraphSetOptions::batched_inputs, batched_inputs=[...])",
                    source));
  }
  const at::Tensor& first = examples[batched[0]];
  const std::int64_t rows = first.defined() && first.dim() >= 1 ? first.size(0) : 0;
  for (int index : batched) {
    const at::Tensor& example = examples[index];
    if (!example.defined() || example.dim() == 0 || example.size(0) == 0 || example.size(0) != rows) {
      throw Error(fmt::format(
          "{}: batched input {} has shape {}; every batched example needs the same number of rows, at least one",
          source, index, example.defined() ? shape_text(example.sizes()) : "none"));
    }
  }
  return batched;
}

std::vector<at::Tensor> inputs_with_rows(const std::vector<at::Tensor>& inputs, const std::vector<int>& batched,
                                         std::int64_t rows) {
  if (rows < 1) throw Error(fmt::format("inputs_with_rows: {} rows: give at least one", rows));
  std::vector<at::Tensor> result = inputs;
  for (int index : batched) {
    if (index < 0 || static_cast<std::size_t>(index) >= inputs.size()) {
      throw Error(
          fmt::format("inputs_with_rows: batched input {} does not exist; {} inputs were given", index, inputs.size()));
    }
    const at::Tensor& input = inputs[index];
    if (!input.defined() || input.dim() == 0 || input.size(0) == 0) {
      throw Error(fmt::format("inputs_with_rows: batched input {} has no rows to cut or repeat", index));
    }
    result[index] = with_rows(input, rows);
  }
  return result;
}

}  // namespace opara
