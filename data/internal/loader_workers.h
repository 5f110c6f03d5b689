#pragma once
// Internal to the data loader (data/*.cpp): the worker threads of a loader
// over a map-style Dataset (the invariants are data/data_loader.h's).

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include <lightning_cpp/data/data_loader.h>

namespace lt {

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

}  // namespace lt
