#pragma once
// A random-access loader over a map-style Dataset: the loops ask for batch i
// of the current epoch, which keeps limit_*_batches, resume and the
// distributed shard bookkeeping simple.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/data/dataset.h>
#include <lightning_cpp/data/sampler.h>

namespace lt {

struct DataLoaderOptions {
  DataLoaderOptions(int64_t batch_size = 1) : batch_size_(batch_size) {}  // NOLINT
  TORCH_ARG(int64_t, batch_size);
  TORCH_ARG(bool, shuffle) = false;
  TORCH_ARG(bool, drop_last) = false;
  TORCH_ARG(uint64_t, seed) = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);

  // Number of batches in an epoch for the current sampler.
  int64_t size() const;
  // Selects the epoch's index order; call before get().
  void set_epoch(int64_t epoch);
  Batch get(int64_t batch_idx) const;
  // The dataset indices of batch `batch_idx` (Lightning's batch_indices).
  std::vector<int64_t> batch_indices(int64_t batch_idx) const;

  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  void set_sampler(std::shared_ptr<Sampler> sampler);
  int64_t num_samples() const { return static_cast<int64_t>(indices_.size()); }

 private:
  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  int64_t epoch_ = 0;
  std::vector<int64_t> indices_;
};

}  // namespace lt
