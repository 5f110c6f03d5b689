#include <lightning_cpp/data/internal/stream_reader.h>

#include <algorithm>

#include <c10/util/StringUtil.h>
#include <torch/utils.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/internal/exception_context.h>

namespace lt {

using detail::with_context;

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

}  // namespace lt
