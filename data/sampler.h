#pragma once
// Samplers give the example indices of one epoch. A strategy replaces a
// loader's sampler (DDP: DistributedSampler) without the user's code knowing.

#include <cstdint>
#include <memory>
#include <vector>

namespace lt {

class Sampler {
 public:
  virtual ~Sampler() = default;
  virtual std::vector<int64_t> indices(int64_t epoch) const = 0;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t size) : size_(size) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t size_;
};

// torch::randperm(size) from a CPU generator seeded `seed + epoch`, the
// order PyTorch's DistributedSampler uses, so single- and multi-process runs
// see the same permutation.
class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t size, uint64_t seed) : size_(size), seed_(seed) {}
  std::vector<int64_t> indices(int64_t epoch) const override;

 private:
  int64_t size_;
  uint64_t seed_;
};

// The indices of `inner`, repeated from their start until there are
// `num_samples`: DistributedSampler's padding, for a sampler the strategy does
// not replace (a custom one, or use_distributed_sampler false).
class PaddedSampler : public Sampler {
 public:
  PaddedSampler(std::shared_ptr<Sampler> inner, int64_t num_samples);
  std::vector<int64_t> indices(int64_t epoch) const override;
  const std::shared_ptr<Sampler>& inner() const { return inner_; }

 private:
  std::shared_ptr<Sampler> inner_;
  int64_t num_samples_;
};

// randperm(n) with a CPU generator seeded `seed`, as PyTorch computes it.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace lt
