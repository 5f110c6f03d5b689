#include <lightning_cpp/data/data_loader.h>

#include <algorithm>

#include <lightning_cpp/core/check.h>

namespace lt {

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  LT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  LT_CHECK(options_.batch_size() >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size());
  if (options_.shuffle()) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed());
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  set_epoch(0);
}

void DataLoader::set_sampler(std::shared_ptr<Sampler> sampler) {
  LT_CHECK(sampler != nullptr, "DataLoader::set_sampler: sampler is null");
  sampler_ = std::move(sampler);
  set_epoch(epoch_);
}

void DataLoader::set_epoch(int64_t epoch) {
  epoch_ = epoch;
  indices_ = sampler_->indices(epoch);
}

int64_t DataLoader::size() const {
  const int64_t n = num_samples(), b = options_.batch_size();
  return options_.drop_last() ? n / b : (n + b - 1) / b;
}

std::vector<int64_t> DataLoader::batch_indices(int64_t batch_idx) const {
  LT_INTERNAL_ASSERT(batch_idx >= 0 && batch_idx < size(), "DataLoader: batch ", batch_idx, " out of range [0, ",
                     size(), ")");
  const int64_t b = options_.batch_size();
  const auto begin = indices_.begin() + batch_idx * b;
  const auto end = indices_.begin() + std::min<int64_t>((batch_idx + 1) * b, num_samples());
  return std::vector<int64_t>(begin, end);
}

Batch DataLoader::get(int64_t batch_idx) const { return dataset_->get_batch(batch_indices(batch_idx)); }

}  // namespace lt
