#include <lightning_cpp/data/batch_sampler.h>

#include <algorithm>
#include <numeric>
#include <utility>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/sampler.h>

namespace lt {

PaddedBatchSampler::PaddedBatchSampler(std::shared_ptr<BatchSampler> inner, int64_t num_batches)
    : inner_(std::move(inner)), num_batches_(num_batches) {
  LT_CHECK(inner_ != nullptr, "PaddedBatchSampler: the batch sampler is null");
}

std::vector<std::vector<int64_t>> PaddedBatchSampler::batches(int64_t epoch) const {
  std::vector<std::vector<int64_t>> out = inner_->batches(epoch);
  const size_t own = out.size();
  LT_CHECK_VALUE(own > 0 || num_batches_ == 0, "uneven_inputs: pad: this rank has no batches to repeat (its ",
                 "batch sampler gave none for epoch ", epoch, "); use uneven_inputs: join");
  for (size_t i = 0; static_cast<int64_t>(out.size()) < num_batches_; ++i) out.push_back(out[i % own]);
  return out;
}

LengthBucketBatchSampler::LengthBucketBatchSampler(std::vector<int64_t> lengths, LengthBucketOptions options)
    : lengths_(std::make_shared<const std::vector<int64_t>>(std::move(lengths))), options_(options) {
  LT_CHECK_VALUE(options_.batch_size() >= 1, "LengthBucketBatchSampler: batch_size must be >= 1, got ",
                 options_.batch_size());
  LT_CHECK_VALUE(options_.max_tokens() >= 0, "LengthBucketBatchSampler: max_tokens must be >= 0, got ",
                 options_.max_tokens());
  LT_CHECK_VALUE(options_.bucket_batches() >= 1, "LengthBucketBatchSampler: bucket_batches must be >= 1, got ",
                 options_.bucket_batches());
  LT_CHECK_VALUE(options_.num_replicas() >= 1 && options_.rank() >= 0 && options_.rank() < options_.num_replicas(),
                 "LengthBucketBatchSampler: rank ", options_.rank(), " is not in [0, num_replicas ",
                 options_.num_replicas(), ")");
  for (size_t i = 0; i < lengths_->size(); ++i) {
    LT_CHECK_VALUE((*lengths_)[i] >= 0, "LengthBucketBatchSampler: lengths[", i, "] is ", (*lengths_)[i]);
  }
}

std::vector<int64_t> LengthBucketBatchSampler::order(int64_t epoch) const {
  const auto n = static_cast<int64_t>(lengths_->size());
  if (options_.shuffle()) return seeded_permutation(n, options_.seed() + static_cast<uint64_t>(epoch));
  std::vector<int64_t> order(static_cast<size_t>(n));
  std::iota(order.begin(), order.end(), 0);
  return order;
}

std::vector<std::vector<int64_t>> LengthBucketBatchSampler::batches(int64_t epoch) const {
  return batches_of(order(epoch), epoch);
}

std::vector<std::vector<int64_t>> LengthBucketBatchSampler::batches_of(const std::vector<int64_t>& order,
                                                                     int64_t epoch) const {
  const std::vector<int64_t>& lengths = *lengths_;
  const auto n = static_cast<int64_t>(order.size());
  const uint64_t seed = options_.seed() + static_cast<uint64_t>(epoch);
  std::vector<int64_t> mine;
  for (int64_t i = options_.rank(); i < n; i += options_.num_replicas()) mine.push_back(order[i]);

  const int64_t b = options_.batch_size();
  const int64_t chunk = options_.bucket_batches() * b;
  std::vector<std::vector<int64_t>> out;
  for (size_t start = 0; start < mine.size(); start += chunk) {
    const auto end = mine.begin() + std::min<int64_t>(start + chunk, mine.size());
    std::stable_sort(mine.begin() + start, end, [&](int64_t a, int64_t c) { return lengths[a] < lengths[c]; });
    std::vector<int64_t> batch;
    int64_t longest = 0;
    for (auto it = mine.begin() + start; it != end; ++it) {
      const int64_t grown = std::max(longest, lengths[*it]);
      const bool full = static_cast<int64_t>(batch.size()) == b ||
                        (options_.max_tokens() > 0 && !batch.empty() &&
                         (static_cast<int64_t>(batch.size()) + 1) * grown > options_.max_tokens());
      if (full) {
        out.push_back(std::move(batch));
        batch.clear();
        longest = 0;
      }
      batch.push_back(*it);
      longest = std::max(longest, lengths[*it]);
    }
    if (!batch.empty()) out.push_back(std::move(batch));
  }
  if (options_.drop_last() && !out.empty() && static_cast<int64_t>(out.back().size()) < b &&
      options_.max_tokens() == 0) {
    out.pop_back();
  }
  if (options_.shuffle() && out.size() > 1) {
    const std::vector<int64_t> perm = seeded_permutation(static_cast<int64_t>(out.size()), seed);
    std::vector<std::vector<int64_t>> shuffled;
    shuffled.reserve(out.size());
    for (int64_t i : perm) shuffled.push_back(std::move(out[i]));
    out = std::move(shuffled);
  }
  return out;
}

std::shared_ptr<BatchSampler> LengthBucketBatchSampler::sharded(int64_t rank, int64_t num_replicas) const {
  auto copy = std::make_shared<LengthBucketBatchSampler>(*this);
  copy->options_.rank(rank).num_replicas(num_replicas);
  return copy;
}

RemainderBatchSampler::RemainderBatchSampler(std::shared_ptr<const LengthBucketBatchSampler> inner, int64_t epoch,
                                             std::vector<int64_t> remaining, std::vector<uint8_t> trained)
    : inner_(std::move(inner)), epoch_(epoch), remaining_(std::move(remaining)), trained_(std::move(trained)) {}

std::vector<std::vector<int64_t>> RemainderBatchSampler::batches(int64_t epoch) const {
  return epoch == epoch_ ? inner_->batches_of(remaining_, epoch) : inner_->batches(epoch);
}

}  // namespace lt
