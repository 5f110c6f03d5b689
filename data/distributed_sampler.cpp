#include <lightning_cpp/data/distributed_sampler.h>

#include <numeric>

#include <lightning_cpp/core/check.h>

namespace lt {

DistributedSampler::DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options)
    : dataset_size_(dataset_size), options_(options) {
  const int64_t w = options_.num_replicas(), r = options_.rank();
  LT_CHECK(w >= 1, "DistributedSampler: num_replicas must be >= 1, got ", w);
  LT_CHECK(r >= 0 && r < w, "DistributedSampler: rank must be in [0, ", w, "), got ", r);
  LT_CHECK(dataset_size_ >= 0, "DistributedSampler: dataset size must be >= 0, got ", dataset_size_);
  int64_t per_rank = 0;
  if (options_.drop_last() && dataset_size_ % w != 0) {
    per_rank = (dataset_size_ - w + w - 1) / w;  // ceil((n - w) / w), n > w here or 0
    if (dataset_size_ < w) per_rank = 0;
  } else {
    per_rank = (dataset_size_ + w - 1) / w;
  }
  total_size_ = per_rank * w;
}

int64_t DistributedSampler::num_samples_for_rank(int64_t rank) const {
  const int64_t w = options_.num_replicas();
  if (!options_.pad() && !options_.drop_last()) {
    // indices[rank::w] of n indices
    return dataset_size_ > rank ? (dataset_size_ - rank + w - 1) / w : 0;
  }
  return total_size_ / w;
}

std::vector<int64_t> DistributedSampler::indices(int64_t epoch) const {
  std::vector<int64_t> all;
  if (options_.shuffle()) {
    all = seeded_permutation(dataset_size_, options_.seed() + static_cast<uint64_t>(epoch));
  } else {
    all.resize(static_cast<size_t>(dataset_size_));
    std::iota(all.begin(), all.end(), 0);
  }
  const bool uneven = !options_.pad() && !options_.drop_last();
  int64_t total = uneven ? dataset_size_ : total_size_;
  if (!uneven && !options_.drop_last() && total > dataset_size_ && dataset_size_ > 0) {
    // PyTorch: indices += (indices * ceil(padding / len))[:padding]
    const size_t n = all.size();
    for (int64_t i = 0; static_cast<int64_t>(all.size()) < total; ++i) all.push_back(all[static_cast<size_t>(i) % n]);
  }
  if (dataset_size_ == 0) total = 0;
  std::vector<int64_t> out;
  out.reserve(static_cast<size_t>(num_samples()));
  for (int64_t i = options_.rank(); i < total; i += options_.num_replicas()) out.push_back(all[static_cast<size_t>(i)]);
  return out;
}

}  // namespace lt
