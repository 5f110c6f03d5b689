#pragma once
// lt::Batch: what a loader hands the loops and training_step receives.
//
// The (data, target) pair of LibTorch's torch::data::Example<> — kept, so a
// LibTorch dataset's examples are batches as they are — plus named tensors,
// as Python users write dict batches:
//
//   lt::Batch b{x, y};                                   // b.data, b.target
//   lt::Batch d({{"tokens", t}, {"lengths", n}});        // d["tokens"], d["lengths"]
//
// Dimension 0 of every tensor is the batch dimension; `target` may be
// undefined (predict). Keys: "data" and "target" name the pair, any other
// key a field.

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <torch/data/example.h>

namespace lt {

struct Batch {
  Batch() = default;
  Batch(torch::Tensor data, torch::Tensor target = {})  // NOLINT: Batch{x, y}
      : data(std::move(data)), target(std::move(target)) {}
  Batch(torch::data::Example<> example)  // NOLINT: what LibTorch datasets return
      : data(std::move(example.data)), target(std::move(example.target)) {}
  explicit Batch(std::map<std::string, torch::Tensor> fields) : fields(std::move(fields)) {}

  torch::Tensor data;
  torch::Tensor target;
  std::map<std::string, torch::Tensor> fields;

  // The tensor under `key`; throws lt::ValueError naming the keys there are.
  const torch::Tensor& operator[](const std::string& key) const;
  bool contains(const std::string& key) const;
  // Every defined tensor with its key: data, target, then the fields by name.
  std::vector<std::pair<std::string, torch::Tensor>> tensors() const;
  // The number of samples: dimension 0 of the first tensor (0 if none).
  int64_t size() const;
  // The same keys, each tensor through `fn` (to a device, pinned, sliced).
  Batch map(const std::function<torch::Tensor(const torch::Tensor&)>& fn) const;
  // The key and shape of every tensor: "data [4, 8] Float, target [4] Long".
  std::string describe() const;
};

}  // namespace lt
