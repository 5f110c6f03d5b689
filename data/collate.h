#pragma once
// Collating examples into a batch (PyTorch's collate_fn). A Dataset's
// get(i) returns one example as an lt::Batch whose tensors have no batch
// dimension yet; a collate function makes one batch of several.
//
//   lt::collate         stacks every tensor (data, target, each field); the
//                       examples must have the same keys and shapes.
//   lt::pad_collate     for variable-length sequences: each sequence key
//                       (`keys`; by default every tensor with a dimension:
//                       dimension 0 is the sequence) is padded to the
//                       batch's longest with `padding_value`, and
//                       "<key>_lengths" (Long [B]) and "<key>_mask" (Bool
//                       [B, T], true on real positions) are added, in every
//                       batch alike; other keys are stacked.

#include <functional>
#include <string>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/core/batch.h>

namespace lt {

using CollateFn = std::function<Batch(const std::vector<Batch>& examples)>;

Batch collate(const std::vector<Batch>& examples);

struct PadCollateOptions {
  TORCH_ARG(double, padding_value) = 0.0;
  // The sequence keys; empty: every key whose tensors have a dimension.
  TORCH_ARG(std::vector<std::string>, keys) = {};
};
Batch pad_collate(const std::vector<Batch>& examples, const PadCollateOptions& options = {});

}  // namespace lt
