#pragma once
// DistributedSampler: this rank's share of a dataset, with the same index
// order as PyTorch's torch.utils.data.DistributedSampler (1.13) for the same
// (size, num_replicas, rank, shuffle, seed, epoch, drop_last):
//   shuffle: torch::randperm(size) from a CPU generator seeded seed + epoch,
//            else 0..size-1;
//   pad (PyTorch's behaviour): without drop_last, repeat indices from the
//            start until the total is a multiple of num_replicas; with
//            drop_last, cut the tail to the largest multiple;
//   this rank: indices[rank : total : num_replicas].
// With pad(false) and no drop_last nothing is repeated: rank r gets
// indices[r::num_replicas] of the permutation, so shards differ by at most
// one sample (the input for uneven-inputs Join).

#include <cstdint>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/data/sampler.h>

namespace lt {

struct DistributedSamplerOptions {
  DistributedSamplerOptions(int64_t num_replicas, int64_t rank) : num_replicas_(num_replicas), rank_(rank) {}
  TORCH_ARG(int64_t, num_replicas);
  TORCH_ARG(int64_t, rank);
  TORCH_ARG(bool, shuffle) = true;
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(bool, drop_last) = false;
  // false: no padding, shards may be uneven (see above).
  TORCH_ARG(bool, pad) = true;
};

class DistributedSampler : public Sampler {
 public:
  DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options);

  // The loader's interface: this rank's indices for `epoch`.
  std::vector<int64_t> indices(int64_t epoch) const override;
  // PyTorch's interface: set_epoch(), then iterate.
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }
  std::vector<int64_t> indices() const { return indices(epoch_); }

  // Samples this rank gets per epoch (PyTorch's len(sampler)); the same every epoch.
  int64_t num_samples() const { return num_samples_for_rank(options_.rank()); }
  int64_t num_samples_for_rank(int64_t rank) const;
  int64_t dataset_size() const { return dataset_size_; }
  const DistributedSamplerOptions& options() const { return options_; }

 private:
  int64_t dataset_size_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  int64_t total_size_ = 0;  // after padding or cutting (the even modes)
};

}  // namespace lt
