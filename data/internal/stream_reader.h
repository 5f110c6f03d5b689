#pragma once
// Internal to the data loader (data/*.cpp): the reader of a loader over a
// stream (data/iterable_dataset.h), with or without worker threads.

#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <optional>
#include <thread>
#include <vector>

#include <lightning_cpp/data/data_loader.h>

namespace lt {

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

}  // namespace lt
