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

// The rest of one epoch after a resume on another world size
// (data/epoch_samples.h): for `epoch`, this rank's share of the samples the
// checkpoint's run had not trained, `remaining[rank :: world_size]` (padded
// by repeating its start to the longest share where `pad`); for other
// epochs, `inner`'s indices. `trained` (a flag per dataset index) is what
// the run before the resume trained of that epoch.
class RemainderSampler : public Sampler {
 public:
  RemainderSampler(std::shared_ptr<Sampler> inner, int64_t epoch, const std::vector<int64_t>& remaining,
                   int64_t rank, int64_t world_size, bool pad, std::vector<uint8_t> trained);
  std::vector<int64_t> indices(int64_t epoch) const override;
  const std::shared_ptr<Sampler>& inner() const { return inner_; }
  int64_t epoch() const { return epoch_; }
  const std::vector<uint8_t>& trained() const { return trained_; }

 private:
  std::shared_ptr<Sampler> inner_;
  int64_t epoch_;
  std::vector<int64_t> mine_;
  std::vector<uint8_t> trained_;
};

// randperm(n) with a CPU generator seeded `seed`, as PyTorch computes it.
std::vector<int64_t> seeded_permutation(int64_t n, uint64_t seed);

}  // namespace lt
