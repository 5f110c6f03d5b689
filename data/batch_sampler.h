#pragma once
// Batch samplers give the batches of one epoch as lists of dataset indices
// (PyTorch's batch_sampler): batch sizes and counts are theirs, not the
// loader's batch_size. A DataLoader given one (set_batch_sampler) uses it
// instead of its sampler.
//
// LengthBucketBatchSampler groups samples of similar length, so that padded
// sequence batches waste little: per epoch,
//   1. the order: torch::randperm(n) seeded seed + epoch (shuffle), else 0..n-1;
//   2. this rank's share: order[rank::num_replicas] (no padding: the shares
//      differ by at most one sample);
//   3. chunks of bucket_batches * batch_size samples, each sorted by length
//      (stable), are cut into batches: batch_size samples each, or with
//      max_tokens as many as keep count * longest length <= max_tokens;
//   4. with shuffle the batch order is permuted (seed + epoch again).
// So ranks get different numbers of batches of different sizes: uneven
// inputs, which uneven_inputs: join trains. Under DDP the strategy gives the
// loader's sampler this rank's share (sharded()), as it does with a
// DistributedSampler, unless use_distributed_sampler is false.

#include <cstdint>
#include <memory>
#include <vector>

#include <torch/arg.h>

namespace lt {

class BatchSampler {
 public:
  virtual ~BatchSampler() = default;
  virtual std::vector<std::vector<int64_t>> batches(int64_t epoch) const = 0;
  // This sampler for rank `rank` of `num_replicas`, or null if it does not
  // shard itself (then the strategy keeps it as given: it must shard itself).
  virtual std::shared_ptr<BatchSampler> sharded(int64_t /*rank*/, int64_t /*num_replicas*/) const { return nullptr; }
};

// The batches of `inner`, repeated from their start until there are
// `num_batches`: uneven_inputs pad for a loader with a batch sampler.
class PaddedBatchSampler : public BatchSampler {
 public:
  PaddedBatchSampler(std::shared_ptr<BatchSampler> inner, int64_t num_batches);
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  const std::shared_ptr<BatchSampler>& inner() const { return inner_; }

 private:
  std::shared_ptr<BatchSampler> inner_;
  int64_t num_batches_;
};

struct LengthBucketOptions {
  LengthBucketOptions(int64_t batch_size) : batch_size_(batch_size) {}  // NOLINT
  // Samples per batch; with max_tokens > 0, at most this many.
  TORCH_ARG(int64_t, batch_size);
  // > 0: a batch holds as many samples as keep count * longest length <= max_tokens.
  TORCH_ARG(int64_t, max_tokens) = 0;
  // Samples sorted together: bucket_batches * batch_size.
  TORCH_ARG(int64_t, bucket_batches) = 50;
  TORCH_ARG(bool, shuffle) = true;
  TORCH_ARG(uint64_t, seed) = 0;
  TORCH_ARG(bool, drop_last) = false;  // drop a last batch with fewer than batch_size samples
  TORCH_ARG(int64_t, num_replicas) = 1;
  TORCH_ARG(int64_t, rank) = 0;
};

class LengthBucketBatchSampler : public BatchSampler {
 public:
  // lengths[i]: the length of sample i (e.g. its number of tokens).
  LengthBucketBatchSampler(std::vector<int64_t> lengths, LengthBucketOptions options);
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  std::shared_ptr<BatchSampler> sharded(int64_t rank, int64_t num_replicas) const override;
  const LengthBucketOptions& options() const { return options_; }
  // Step 1: the epoch's order of every sample.
  std::vector<int64_t> order(int64_t epoch) const;
  // Steps 2-4 on `order` (dataset indices): this rank's batches.
  std::vector<std::vector<int64_t>> batches_of(const std::vector<int64_t>& order, int64_t epoch) const;

 private:
  std::shared_ptr<const std::vector<int64_t>> lengths_;  // shared by the rank copies
  LengthBucketOptions options_;
};

// The rest of epoch `epoch` of a run resumed on another world size
// (data/epoch_samples.h): the samples not trained yet (`remaining`, in the
// epoch's order) bucketed by `inner` (sharded for this rank) as it buckets
// an epoch; the other epochs are `inner`'s. `trained` marks what the
// checkpoint recorded (1: trained).
class RemainderBatchSampler : public BatchSampler {
 public:
  RemainderBatchSampler(std::shared_ptr<const LengthBucketBatchSampler> inner, int64_t epoch,
                        std::vector<int64_t> remaining, std::vector<uint8_t> trained);
  std::vector<std::vector<int64_t>> batches(int64_t epoch) const override;
  const std::shared_ptr<const LengthBucketBatchSampler>& inner() const { return inner_; }
  int64_t epoch() const { return epoch_; }
  const std::vector<uint8_t>& trained() const { return trained_; }

 private:
  std::shared_ptr<const LengthBucketBatchSampler> inner_;
  int64_t epoch_;
  std::vector<int64_t> remaining_;
  std::vector<uint8_t> trained_;
};

}  // namespace lt
