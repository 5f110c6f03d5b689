#include <lightning_cpp/data/data_loader.h>

#include <algorithm>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <limits>
#include <mutex>
#include <stdexcept>
#include <string>
#include <thread>

#include <c10/util/Exception.h>
#include <torch/cuda.h>
#include <torch/utils.h>

#include <lightning_cpp/core/check.h>

namespace lt {

namespace {

Batch pinned(const Batch& batch) {
  return batch.map([](const torch::Tensor& t) { return t.pin_memory(); });
}

// "samples 28..31", "sample 5", or the first few of a shuffled batch.
std::string describe_samples(const std::vector<int64_t>& s) {
  if (s.size() == 1) return c10::str("sample ", s[0]);
  bool ascending_run = true;
  for (size_t k = 1; k < s.size() && ascending_run; ++k) ascending_run = s[k] == s[k - 1] + 1;
  if (ascending_run) return c10::str("samples ", s.front(), "..", s.back());
  constexpr size_t kShown = 8;
  std::string out = "samples ";
  for (size_t k = 0; k < std::min(s.size(), kShown); ++k) out += c10::str(k ? ", " : "", s[k]);
  if (s.size() > kShown) out += c10::str(", ... (", s.size(), " in all)");
  return out;
}

template <typename E>
std::exception_ptr c10_with_context(const E& e, const std::string& context) {
  return std::make_exception_ptr(E(context + e.what_without_backtrace(), e.backtrace(), e.caller()));
}

// The same exception type where we know how to rebuild it (lt's, c10's, the
// standard ones users throw), its message prefixed with `context`; any other
// as a std::runtime_error.
std::exception_ptr with_context(std::exception_ptr error, const std::string& context) {
  try {
    std::rethrow_exception(error);
  } catch (const ValueError& e) {
    return std::make_exception_ptr(ValueError(context + e.what()));
  } catch (const Error& e) {
    return std::make_exception_ptr(Error(context + e.what()));
  } catch (const c10::IndexError& e) {
    return c10_with_context(e, context);
  } catch (const c10::ValueError& e) {
    return c10_with_context(e, context);
  } catch (const c10::TypeError& e) {
    return c10_with_context(e, context);
  } catch (const c10::NotImplementedError& e) {
    return c10_with_context(e, context);
  } catch (const c10::Error& e) {
    return c10_with_context(e, context);
  } catch (const std::invalid_argument& e) {
    return std::make_exception_ptr(std::invalid_argument(context + e.what()));
  } catch (const std::out_of_range& e) {
    return std::make_exception_ptr(std::out_of_range(context + e.what()));
  } catch (const std::exception& e) {
    return std::make_exception_ptr(std::runtime_error(context + e.what()));
  } catch (...) {
    return std::make_exception_ptr(std::runtime_error(context + "an exception that is not a std::exception"));
  }
}

}  // namespace

// The prefetch window and its worker threads. All members but the dataset
// are guarded by mutex_. A slot is shared by the window and the worker that
// computes it, so dropping it from the window (a restart, shutdown) never
// waits for that worker: its result lands in a slot nobody reads.
class DataLoader::Workers {
 public:
  Workers(const DataLoader& loader, int64_t num_workers, int64_t window)
      : loader_(loader), num_workers_(num_workers), window_size_(window) {}
  ~Workers() { stop(); }

  Batch get(int64_t batch_idx, std::vector<int64_t> indices, int64_t epoch_size);
  void stop();

 private:
  struct Slot {
    Slot(int64_t batch_idx, int64_t epoch, std::vector<int64_t> indices)
        : batch_idx(batch_idx), epoch(epoch), indices(std::move(indices)) {}
    const int64_t batch_idx;
    const int64_t epoch;
    const std::vector<int64_t> indices;
    bool started = false;
    bool done = false;
    Batch batch;
    std::exception_ptr error;
  };

  void run();
  std::shared_ptr<Slot> make_slot(int64_t batch_idx, std::vector<int64_t> indices) const {
    return std::make_shared<Slot>(batch_idx, loader_.epoch_, std::move(indices));
  }

  const DataLoader& loader_;  // owns this; its batches are only changed after stop()
  const int64_t num_workers_;
  const int64_t window_size_;
  std::mutex consumer_mutex_;  // one get() or stop() at a time: a get() waits on a slot only it drops
  std::mutex mutex_;
  std::condition_variable work_cv_;  // a worker waits for an unstarted slot or stop_
  std::condition_variable done_cv_;  // get() waits for its slot to be done
  // Consecutive batches, front = the one get() serves or served last.
  std::deque<std::shared_ptr<Slot>> window_;
  bool stop_ = false;
  std::vector<std::thread> threads_;
};

Batch DataLoader::Workers::get(int64_t batch_idx, std::vector<int64_t> indices, int64_t epoch_size) {
  std::lock_guard<std::mutex> consumer(consumer_mutex_);
  std::unique_lock<std::mutex> lock(mutex_);
  if (threads_.empty()) {
    threads_.reserve(static_cast<size_t>(num_workers_));
    for (int64_t w = 0; w < num_workers_; ++w) threads_.emplace_back([this] { run(); });
  }
  // A batch ahead in the window is served from it; any other index restarts
  // the window there (a resumed epoch, a limit, a second validation pass).
  while (!window_.empty() && window_.front()->batch_idx < batch_idx) window_.pop_front();
  if (!window_.empty() && window_.front()->batch_idx != batch_idx) window_.clear();
  if (window_.empty()) window_.push_back(make_slot(batch_idx, std::move(indices)));
  const int64_t end = std::min(epoch_size, batch_idx + 1 + window_size_);
  for (int64_t next = window_.back()->batch_idx + 1; next < end; ++next) {
    window_.push_back(make_slot(next, loader_.batch_indices(next)));
  }
  work_cv_.notify_all();
  std::shared_ptr<Slot> slot = window_.front();
  done_cv_.wait(lock, [&] { return slot->done; });
  window_.pop_front();
  lock.unlock();
  if (slot->error) std::rethrow_exception(slot->error);
  return std::move(slot->batch);
}

void DataLoader::Workers::stop() {
  std::lock_guard<std::mutex> consumer(consumer_mutex_);
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    window_.clear();
  }
  work_cv_.notify_all();
  for (std::thread& t : threads_) t.join();
  threads_.clear();
  std::lock_guard<std::mutex> lock(mutex_);
  stop_ = false;
}

void DataLoader::Workers::run() {
  // Batches are inputs: no autograd. (Not InferenceMode: its tensors cannot be
  // saved for backward by the training step.)
  torch::NoGradGuard no_grad;
  std::unique_lock<std::mutex> lock(mutex_);
  while (true) {
    std::shared_ptr<Slot> slot;
    work_cv_.wait(lock, [&] {
      if (stop_) return true;
      for (const auto& s : window_) {
        if (!s->started) {
          slot = s;
          return true;
        }
      }
      return false;
    });
    if (stop_) return;
    slot->started = true;
    lock.unlock();
    Batch batch;
    std::exception_ptr error;
    try {
      batch = loader_.load(slot->indices);
    } catch (...) {
      error = with_context(std::current_exception(), c10::str("DataLoader worker: epoch ", slot->epoch, ", batch ",
                                                              slot->batch_idx, " (", describe_samples(slot->indices),
                                                              "): "));
    }
    lock.lock();
    slot->batch = std::move(batch);
    slot->error = error;
    slot->done = true;
    done_cv_.notify_all();
  }
}

// A stream's batches in the loader's order. Without workers: one stream,
// read by next() on the caller's thread. With W workers: W streams (the
// shard's worker 0..W-1), each read by its own thread into its own queue of
// at most prefetch_factor batches. Either way next() takes a batch from the
// live streams in turn, a stream leaving the turn at its end, so the order
// depends on each stream's batches, never on timing; start(i) replays that
// turn with ExampleStream::skip to stand at batch i. A worker's exception is
// rethrown by the next() that comes to its turn. stop() joins every thread,
// after the read each is in (a stream's next() is never interrupted).
class DataLoader::StreamReader {
 public:
  explicit StreamReader(const DataLoader& loader) : loader_(loader) {}
  ~StreamReader() { stop(); }

  // This epoch's streams, opened and standing at batch `first`.
  void start(int64_t first);
  std::optional<Batch> next();
  // The index of the batch next() returns; -1 when stopped.
  int64_t next_index() const { return next_index_; }
  void stop();

 private:
  struct Item {
    std::optional<Batch> batch;  // nullopt: the stream's end
    std::exception_ptr error;
  };
  struct Worker {
    std::unique_ptr<ExampleStream> stream;
    std::deque<Item> queue;  // guarded by mutex_
    std::thread thread;
  };

  void run(Worker& worker);
  // Ends the turn of live_[cursor_]: `ended` drops it from the turn.
  void pass_turn(bool ended) {
    if (ended) {
      live_.erase(live_.begin() + static_cast<std::ptrdiff_t>(cursor_));
    } else {
      ++cursor_;
    }
    if (cursor_ >= live_.size()) cursor_ = 0;
  }

  const DataLoader& loader_;  // owns this
  std::vector<std::unique_ptr<Worker>> workers_;
  std::vector<size_t> live_;  // workers whose stream has not ended, in turn order
  size_t cursor_ = 0;         // live_[cursor_] gives the next batch
  int64_t next_index_ = -1;
  std::mutex mutex_;
  std::condition_variable cv_;  // a queue changed, or stop_
  bool stop_ = false;
};

void DataLoader::StreamReader::start(int64_t first) {
  stop();
  const int64_t num_workers = std::max<int64_t>(1, loader_.options_.num_workers());
  for (int64_t w = 0; w < num_workers; ++w) {
    auto worker = std::make_unique<Worker>();
    worker->stream = loader_.open_stream(w);
    LT_CHECK(worker->stream != nullptr, "IterableDataset::open returned no stream (epoch ", loader_.epoch_, ", rank ",
             loader_.shard_.rank, ", worker ", w, ")");
    workers_.push_back(std::move(worker));
    live_.push_back(static_cast<size_t>(w));
  }
  // A resumed epoch: the batches before `first`, skipped in turn.
  const int64_t b = loader_.options_.batch_size();
  for (int64_t i = 0; i < first && !live_.empty();) {
    const int64_t skipped = workers_[live_[cursor_]]->stream->skip(b);
    const bool ended = skipped == 0 || (loader_.options_.drop_last() && skipped < b);
    pass_turn(ended);
    if (!ended) ++i;
  }
  next_index_ = first;
  if (loader_.options_.num_workers() == 0) return;
  for (size_t w : live_) {
    Worker& worker = *workers_[w];
    worker.thread = std::thread([this, &worker] { run(worker); });
  }
}

std::optional<Batch> DataLoader::StreamReader::next() {
  LT_INTERNAL_ASSERT(next_index_ >= 0, "DataLoader: the stream reader is not started");
  while (!live_.empty()) {
    const size_t w = live_[cursor_];
    Worker& worker = *workers_[w];
    std::optional<Batch> batch;
    if (!worker.thread.joinable()) {
      batch = loader_.read_batch(*worker.stream);
    } else {
      Item item;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        cv_.wait(lock, [&] { return !worker.queue.empty(); });
        item = std::move(worker.queue.front());
        worker.queue.pop_front();
      }
      cv_.notify_all();
      if (item.error) {
        std::exception_ptr error =
            with_context(item.error, c10::str("DataLoader worker ", w, " of ", workers_.size(), ": epoch ",
                                              loader_.epoch_, ", batch ", next_index_, " (rank ", loader_.shard_.rank,
                                              "'s stream): "));
        stop();
        std::rethrow_exception(error);
      }
      batch = std::move(item.batch);
    }
    pass_turn(!batch);
    if (batch) {
      ++next_index_;
      return batch;
    }
  }
  return std::nullopt;
}

void DataLoader::StreamReader::stop() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
  }
  cv_.notify_all();
  for (auto& worker : workers_) {
    if (worker->thread.joinable()) worker->thread.join();
  }
  workers_.clear();
  live_.clear();
  cursor_ = 0;
  next_index_ = -1;
  stop_ = false;
}

void DataLoader::StreamReader::run(Worker& worker) {
  torch::NoGradGuard no_grad;  // batches are inputs (see Workers::run)
  const auto prefetch = static_cast<size_t>(loader_.options_.prefetch_factor());
  while (true) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      cv_.wait(lock, [&] { return stop_ || worker.queue.size() < prefetch; });
      if (stop_) return;
    }
    Item item;
    try {
      item.batch = loader_.read_batch(*worker.stream);
    } catch (...) {
      item.error = std::current_exception();
    }
    const bool last = !item.batch || item.error;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      worker.queue.push_back(std::move(item));
    }
    cv_.notify_all();
    if (last) return;
  }
}

// No overflow for any b (n + b - 1 would).
int64_t batch_count(int64_t n, int64_t b, bool drop_last) { return n / b + (!drop_last && n % b != 0 ? 1 : 0); }

DataLoader::DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options)
    : dataset_(std::move(dataset)), options_(options) {
  LT_CHECK(dataset_ != nullptr, "DataLoader: dataset is null");
  LT_CHECK(options_.batch_size() >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size());
  LT_CHECK_VALUE(options_.num_workers() >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers());
  LT_CHECK_VALUE(options_.prefetch_factor() >= 1, "DataLoader: prefetch_factor must be >= 1, got ",
                 options_.prefetch_factor());
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
  LT_CHECK_VALUE(options_.batch_size() >= 1, "DataLoader: batch_size must be >= 1, got ", options_.batch_size());
  LT_CHECK_VALUE(options_.num_workers() >= 0, "DataLoader: num_workers must be >= 0, got ", options_.num_workers());
  LT_CHECK_VALUE(options_.prefetch_factor() >= 1, "DataLoader: prefetch_factor must be >= 1, got ",
                 options_.prefetch_factor());
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
