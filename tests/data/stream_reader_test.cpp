// DataLoader with worker threads (num_workers > 0): the same batches as
// without workers, the prefetch window, errors from workers, and no thread
// left behind. Real threads; no assertion depends on timing (a wait for a
// prefetched batch has a generous deadline, and can only fail if the batch
// never comes).
// This file: streams (data/iterable_dataset.h) read by workers
// (data/internal/stream_reader.h), in PyTorch's order.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <mutex>
#include <optional>
#include <set>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <c10/util/Exception.h>
#include <torch/cuda.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/trainer/trainer.h>

#include "data/data_loader_fixture.h"
#include "support/seeding.h"

using namespace lt::testing;  // count_threads (data/data_loader_fixture.h)

namespace {

using lt::Batch;
using std::chrono::milliseconds;

// -- streams (IterableDataset) read by workers ----------------------------------

// Worker w's stream (of `lengths.size()` workers) yields lengths[w] examples,
// targets 1000 * w + j; records the threads that read and the shards opened.
// Can sleep per example and throw at one (worker, example).
class WorkerStreams : public lt::IterableDataset {
 public:
  explicit WorkerStreams(std::vector<int64_t> lengths, bool known = true, milliseconds per_example = milliseconds(0))
      : lengths_(std::move(lengths)), known_(known), per_example_(per_example) {}
  std::unique_ptr<lt::ExampleStream> open(int64_t /*epoch*/, const lt::StreamShard& shard) const override {
    LT_CHECK(shard.num_workers == static_cast<int64_t>(lengths_.size()), "opened for ", shard.num_workers,
             " workers");
    std::lock_guard<std::mutex> lock(mutex_);
    opened_.push_back(shard.worker);
    return std::make_unique<Stream>(*this, shard.worker);
  }
  std::optional<int64_t> length(const lt::StreamShard& shard) const override {
    return known_ ? std::optional<int64_t>(lengths_.at(shard.worker)) : std::nullopt;
  }
  std::set<std::thread::id> readers() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return readers_;
  }
  std::vector<int64_t> opened() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return opened_;
  }

  int64_t bad_worker = -1, bad_example = -1;

 private:
  struct Stream : lt::ExampleStream {
    Stream(const WorkerStreams& owner, int64_t worker) : owner(owner), worker(worker) {}
    std::optional<Batch> next() override {
      {
        std::lock_guard<std::mutex> lock(owner.mutex_);
        owner.readers_.insert(std::this_thread::get_id());
      }
      if (j >= owner.lengths_.at(worker)) return std::nullopt;
      if (owner.per_example_.count() > 0) std::this_thread::sleep_for(owner.per_example_);
      if (worker == owner.bad_worker && j == owner.bad_example) throw lt::ValueError("a torn record");
      ++j;
      return Batch(torch::full({2}, static_cast<float>(j)), torch::tensor(1000 * worker + j - 1));
    }
    const WorkerStreams& owner;
    int64_t worker;
    int64_t j = 0;
  };
  std::vector<int64_t> lengths_;
  bool known_;
  milliseconds per_example_;
  mutable std::mutex mutex_;
  mutable std::set<std::thread::id> readers_;
  mutable std::vector<int64_t> opened_;
};

// The first target of each batch, read through get(i) until the loader has no batch i.
std::vector<int64_t> first_targets(const lt::DataLoader& loader) {
  std::vector<int64_t> out;
  for (int64_t i = 0; loader.has_batch(i); ++i) out.push_back(loader.get(i).target[0].item<int64_t>());
  return out;
}

// Workers of 5, 1 and 9 examples in batches of 2 (PyTorch's order): a batch
// from each live worker in turn; worker 1 leaves the turn after its one
// (partial) batch, worker 0 after its three, worker 2 gives the rest.
TEST_F(DataLoaderWorkersTest, StreamWorkersTakeTurnsUntilEachStreamEnds) {
  auto streams = std::make_shared<WorkerStreams>(std::vector<int64_t>{5, 1, 9});
  lt::DataLoader loader(streams, lt::DataLoaderOptions(2).num_workers(3));
  EXPECT_EQ(loader.size(), 3 + 1 + 5);
  const std::vector<int64_t> order = {0, 1000, 2000, 2, 2002, 4, 2004, 2006, 2008};
  EXPECT_EQ(first_targets(loader), order);
  // Read by the worker threads, not the caller's.
  EXPECT_EQ(streams->readers().count(std::this_thread::get_id()), 0u);
  EXPECT_GE(streams->readers().size(), 3u);
  EXPECT_EQ(loader.get(5).target.numel(), 1) << "worker 0's last batch is partial";
  // drop_last drops each worker's partial batch: worker 1 has none.
  lt::DataLoader dropping(streams, lt::DataLoaderOptions(2).num_workers(3).drop_last(true));
  EXPECT_EQ(dropping.size(), 2 + 0 + 4);
  EXPECT_EQ(first_targets(dropping), (std::vector<int64_t>{0, 2000, 2, 2002, 2004, 2006}));
  // The same order every epoch and run, whatever the timing: slow workers.
  auto slow = std::make_shared<WorkerStreams>(std::vector<int64_t>{5, 1, 9}, false, milliseconds(1));
  lt::DataLoader unknown(slow, lt::DataLoaderOptions(2).num_workers(3).prefetch_factor(1));
  EXPECT_EQ(unknown.size(), lt::DataLoader::kUnknownSize);
  for (int64_t epoch = 0; epoch < 3; ++epoch) {
    unknown.set_epoch(epoch);
    EXPECT_EQ(first_targets(unknown), order) << "epoch " << epoch;
  }
}

// A resumed epoch (get(i) first) reopens the streams and skips, worker by
// worker in their turns, the batches before i: batch i is the one an
// uninterrupted epoch gives.
TEST_F(DataLoaderWorkersTest, StreamWorkersResumeAtAnyBatch) {
  auto streams = std::make_shared<WorkerStreams>(std::vector<int64_t>{5, 1, 9}, false);
  const std::vector<int64_t> order = {0, 1000, 2000, 2, 2002, 4, 2004, 2006, 2008};
  for (int64_t start = 0; start <= static_cast<int64_t>(order.size()); ++start) {
    lt::DataLoader loader(streams, lt::DataLoaderOptions(2).num_workers(3));
    std::vector<int64_t> rest;
    for (int64_t i = start; loader.has_batch(i); ++i) rest.push_back(loader.get(i).target[0].item<int64_t>());
    EXPECT_EQ(rest, std::vector<int64_t>(order.begin() + start, order.end())) << "from batch " << start;
  }
  // One worker: the order of the stream without workers.
  auto one = std::make_shared<WorkerStreams>(std::vector<int64_t>{7});
  lt::DataLoader with(one, lt::DataLoaderOptions(3).num_workers(1));
  lt::DataLoader without(one, lt::DataLoaderOptions(3));
  EXPECT_EQ(first_targets(with), first_targets(without));
  EXPECT_EQ(first_targets(with), (std::vector<int64_t>{0, 3, 6}));
}

// A worker's exception reaches the caller with the worker, epoch and batch
// in front of its message and its type kept; the next batch asked for
// reopens the streams; no thread is left behind, whatever happens.
TEST_F(DataLoaderWorkersTest, StreamWorkerExceptionsAndThreads) {
  const int64_t before = count_threads();
  auto streams = std::make_shared<WorkerStreams>(std::vector<int64_t>{4, 4});
  streams->bad_worker = 1;
  streams->bad_example = 2;  // in worker 1's second batch: the loader's batch 3
  {
    lt::DataLoader loader(streams, lt::DataLoaderOptions(2).num_workers(2));
    loader.set_epoch(4);
    for (int64_t i = 0; i < 3; ++i) loader.get(i);
    try {
      loader.get(3);
      FAIL() << "expected the worker's error";
    } catch (const lt::ValueError& e) {
      EXPECT_STREQ(e.what(), "DataLoader worker 1 of 2: epoch 4, batch 3 (rank 0's stream): a torn record");
    }
    EXPECT_EQ(count_threads(), before) << "the failed reader's threads are joined";
    const auto opened = streams->opened().size();
    streams->bad_worker = -1;
    EXPECT_EQ(loader.get(3).target[0].item<int64_t>(), 1002);
    EXPECT_EQ(streams->opened().size(), opened + 2) << "reopened";
  }
  EXPECT_EQ(count_threads(), before) << "after the loader";
  {  // Stopped mid-epoch with reads in flight, by set_epoch, shutdown and the destructor.
    auto slow = std::make_shared<WorkerStreams>(std::vector<int64_t>{50, 50, 50}, false, milliseconds(2));
    lt::DataLoader loader(slow, lt::DataLoaderOptions(4).num_workers(3).prefetch_factor(3));
    loader.get(0);
    EXPECT_EQ(count_threads(), before + 3);
    loader.set_epoch(1);
    EXPECT_EQ(count_threads(), before);
    loader.get(0);
    loader.shutdown();
    EXPECT_EQ(count_threads(), before);
    EXPECT_EQ(loader.get(1).target[0].item<int64_t>(), 1000) << "after shutdown, reopened at batch 1";
  }
  EXPECT_EQ(count_threads(), before) << "after an early stop";
}

}  // namespace
