#include <lightning_cpp/data/data_loader.h>

#include <algorithm>
#include <cstddef>
#include <limits>
#include <string>

#include <torch/cuda.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/internal/loader_workers.h>
#include <lightning_cpp/data/internal/stream_reader.h>

namespace lt {

namespace {

Batch pinned(const Batch& batch) {
  return batch.map([](const torch::Tensor& t) { return t.pin_memory(); });
}

// The rows' range checks (data_loader_options.def): lt::ValueError "DataLoader: <option> must be ...".
void check_options(const DataLoaderOptions& options) {
  const char* owner = "DataLoader: ";
#define LT_OPTION LT_OPTION_CHECK
#define LT_CPP_OPTION LT_CPP_OPTION_NONE
#include <lightning_cpp/data/data_loader_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
}

}  // namespace

// No overflow for any b (n + b - 1 would).
int64_t batch_count(int64_t n, int64_t b, bool drop_last) { return n / b + (!drop_last && n % b != 0 ? 1 : 0); }

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  LT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  check_options(options_);
  if (options_.shuffle()) {
    sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed());
  } else {
    sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
  pin_ = options_.pin_memory() && torch::cuda::is_available();
  if (options_.num_workers() > 0) {
    workers_ = std::make_unique<Workers>(*this, options_.num_workers(),
                                         options_.num_workers() * options_.prefetch_factor());
  }
  set_epoch(0);
}

DataLoader::DataLoader(std::shared_ptr<IterableDataset> stream, DataLoaderOptions options)
    : options_(options), stream_dataset_(std::move(stream)) {
  LT_CHECK(stream_dataset_ != nullptr, "DataLoader: dataset is null");
  check_options(options_);
  LT_CHECK_VALUE(!options_.shuffle(), "DataLoader over an IterableDataset: shuffle is not supported (the stream ",
                 "gives the order: shuffle inside the stream, e.g. per epoch as IterableDataset::open's epoch tells)");
  pin_ = options_.pin_memory() && torch::cuda::is_available();
}

int64_t DataLoader::size() const {
  if (!is_stream()) return static_cast<int64_t>(batches_.size());
  const int64_t b = options_.batch_size();
  int64_t batches = 0;
  for (int64_t w = 0; w < std::max<int64_t>(1, options_.num_workers()); ++w) {
    const std::optional<int64_t> length = stream_length(w);
    if (!length) return kUnknownSize;
    batches += batch_count(*length, b, options_.drop_last());
  }
  return batches;
}

int64_t DataLoader::limited_size(const FractionOrCount& limit, const char* name) const {
  const int64_t n = size();
  if (n != kUnknownSize) return limit.apply(n);
  if (limit.is_count()) return limit.count();
  LT_CHECK_VALUE(limit.fraction() == 1.0, name, ": ", limit.fraction(), " is a fraction of the epoch, and this data is ",
                 "a stream of unknown length; give a number of batches, or the stream's length ",
                 "(IterableDataset::length)");
  return std::numeric_limits<int64_t>::max();
}

StreamShard DataLoader::worker_shard(int64_t worker) const {
  StreamShard shard = shard_;
  shard.worker = worker;
  shard.num_workers = std::max<int64_t>(1, options_.num_workers());
  return shard;
}

void DataLoader::set_stream_shard(StreamShard shard) {
  shard_ = shard;
  set_epoch(epoch_);
}

void DataLoader::set_stream_remainder(std::shared_ptr<const StreamRemainder> rest) {
  LT_CHECK(is_stream(), "DataLoader::set_stream_remainder: the loader's data is not a stream");
  stream_rest_ = std::move(rest);
  set_epoch(epoch_);
}

std::optional<int64_t> DataLoader::stream_length(int64_t worker) const {
  if (stream_rest_ && stream_rest_->epoch() == epoch_) return stream_rest_->length(worker_shard(worker));
  return stream_dataset_->length(worker_shard(worker));
}

std::unique_ptr<ExampleStream> DataLoader::open_stream(int64_t worker) const {
  if (stream_rest_ && stream_rest_->epoch() == epoch_) return stream_rest_->open(worker_shard(worker));
  return stream_dataset_->open(epoch_, worker_shard(worker));
}

bool DataLoader::has_batch(int64_t batch_idx) const {
  if (!is_stream()) return batch_idx >= 0 && batch_idx < size();
  for (const auto& [index, batch] : ahead_) {
    if (index == batch_idx) return batch.has_value();
  }
  std::optional<Batch> batch = stream_batch(batch_idx);
  const bool exists = batch.has_value();
  ahead_.emplace_back(batch_idx, std::move(batch));
  if (ahead_.size() > 2) ahead_.pop_front();
  return exists;
}

std::optional<Batch> DataLoader::stream_batch(int64_t batch_idx) const {
  if (!reader_) reader_ = std::make_unique<StreamReader>(*this);
  if (reader_->next_index() != batch_idx) reader_->start(batch_idx);
  try {
    return reader_->next();
  } catch (...) {
    reader_->stop();  // the next batch asked for reopens the streams
    throw;
  }
}

std::optional<Batch> DataLoader::read_batch(ExampleStream& stream) const {
  const int64_t b = options_.batch_size();
  std::vector<Batch> examples;
  while (static_cast<int64_t>(examples.size()) < b) {
    std::optional<Batch> example = stream.next();
    if (!example) break;
    examples.push_back(std::move(*example));
  }
  if (examples.empty() || (options_.drop_last() && static_cast<int64_t>(examples.size()) < b)) return std::nullopt;
  Batch batch = options_.collate() ? options_.collate()(examples) : collate(examples);
  return pin_ ? pinned(batch) : batch;
}

// Joins the workers before the members they read (dataset_, options_) go.
DataLoader::~DataLoader() {
  workers_.reset();
  reader_.reset();
}

void DataLoader::shutdown() {
  if (workers_) workers_->stop();
  if (reader_) reader_->stop();
}

void DataLoader::set_sampler(std::shared_ptr<Sampler> sampler) {
  LT_CHECK(sampler != nullptr, "DataLoader::set_sampler: sampler is null");
  shutdown();
  sampler_ = std::move(sampler);
  set_epoch(epoch_);
}

void DataLoader::set_batch_sampler(std::shared_ptr<BatchSampler> batch_sampler) {
  shutdown();
  batch_sampler_ = std::move(batch_sampler);
  set_epoch(epoch_);
}

void DataLoader::set_epoch(int64_t epoch) {
  shutdown();
  epoch_ = epoch;
  ahead_.clear();
  if (is_stream()) return;
  batches_.clear();
  num_samples_ = 0;
  if (batch_sampler_) {
    batches_ = batch_sampler_->batches(epoch);
    for (const auto& batch : batches_) {
      LT_CHECK_VALUE(!batch.empty(), "DataLoader: the batch sampler gave an empty batch (epoch ", epoch, ")");
      num_samples_ += static_cast<int64_t>(batch.size());
    }
    return;
  }
  const std::vector<int64_t> indices = sampler_->indices(epoch);
  const auto n = static_cast<int64_t>(indices.size()), b = options_.batch_size();
  const int64_t count = batch_count(n, b, options_.drop_last());
  for (int64_t i = 0; i < count; ++i) {
    batches_.emplace_back(indices.begin() + i * b, indices.begin() + std::min((i + 1) * b, n));
    num_samples_ += static_cast<int64_t>(batches_.back().size());
  }
}

std::vector<int64_t> DataLoader::batch_indices(int64_t batch_idx) const {
  LT_INTERNAL_ASSERT(batch_idx >= 0 && batch_idx < size(), "DataLoader: batch ", batch_idx, " out of range [0, ",
                     size(), ")");
  return batches_[batch_idx];
}

Batch DataLoader::load(const std::vector<int64_t>& indices) const {
  Batch batch;
  if (options_.collate()) {
    std::vector<Batch> examples;
    examples.reserve(indices.size());
    for (int64_t i : indices) examples.push_back(dataset_->get(i));
    batch = options_.collate()(examples);
  } else {
    batch = dataset_->get_batch(indices);
  }
  return pin_ ? pinned(batch) : batch;
}

Batch DataLoader::get(int64_t batch_idx) const {
  if (is_stream()) {
    std::optional<Batch> batch;
    auto it = std::find_if(ahead_.begin(), ahead_.end(), [&](const auto& a) { return a.first == batch_idx; });
    if (it != ahead_.end()) {
      batch = std::move(it->second);
      ahead_.erase(ahead_.begin(), it + 1);
    } else {
      batch = stream_batch(batch_idx);
    }
    LT_CHECK_VALUE(batch.has_value(), "DataLoader: the stream has no batch ", batch_idx, " (epoch ", epoch_, ", rank ",
                   shard_.rank, ")");
    return std::move(*batch);
  }
  std::vector<int64_t> indices = batch_indices(batch_idx);
  if (!workers_) return load(indices);
  return workers_->get(batch_idx, std::move(indices), size());
}

}  // namespace lt
