#pragma once
// Map-style datasets returning lt::Batch (core/batch.h). Any LibTorch dataset
// (torch::data::datasets::Dataset<Self, Example<>>) can be wrapped with
// lt::from_torch_dataset.

#include <cstdint>
#include <memory>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/types.h>

namespace lt {

// Thread-safety: with DataLoaderOptions::num_workers > 0, get() and
// get_batch() are called from several worker threads at once (never while the
// loader's set_epoch or set_sampler runs); they are const and must stay safe
// to call concurrently (no unguarded mutable state, no shared file cursor).
// Random augmentation drawn there from the default generator then depends on
// the workers' timing; a generator seeded from the index keeps runs reproducible.
class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual Batch get(int64_t index) const = 0;
  // Collates the examples at `indices`. The default stacks get(i); tensor
  // datasets override it with one index_select.
  virtual Batch get_batch(const std::vector<int64_t>& indices) const;
};

// Rows of `data` (and `targets`, if defined) are the examples.
class TensorDataset : public Dataset {
 public:
  TensorDataset(torch::Tensor data, torch::Tensor targets = {});
  int64_t size() const override { return data_.size(0); }
  Batch get(int64_t index) const override;
  Batch get_batch(const std::vector<int64_t>& indices) const override;
  const torch::Tensor& data() const { return data_; }
  const torch::Tensor& targets() const { return targets_; }

 private:
  torch::Tensor data_;
  torch::Tensor targets_;
};

template <typename TorchDataset>
class TorchDatasetAdapter : public Dataset {
 public:
  explicit TorchDatasetAdapter(TorchDataset dataset) : dataset_(std::move(dataset)) {}
  int64_t size() const override { return static_cast<int64_t>(dataset_.size().value()); }
  Batch get(int64_t index) const override {
    return const_cast<TorchDataset&>(dataset_).get(static_cast<size_t>(index));
  }

 private:
  TorchDataset dataset_;
};

template <typename TorchDataset>
std::shared_ptr<Dataset> from_torch_dataset(TorchDataset dataset) {
  return std::make_shared<TorchDatasetAdapter<TorchDataset>>(std::move(dataset));
}

}  // namespace lt
