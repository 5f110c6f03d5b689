// DataLoader with worker threads (num_workers > 0): the same batches as
// without workers, the prefetch window, errors from workers, and no thread
// left behind. Real threads; no assertion depends on timing (a wait for a
// prefetched batch has a generous deadline, and can only fail if the batch
// never comes).
// This file: data/data_loader.h and data/internal/loader_workers.h on a
// map-style dataset; the oracle is the same loader without workers.
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

enum class Throw { kNone, kLtValueError, kC10IndexError, kOutOfRange, kInt };

// Example i is (row i of `data`, i). Records which batches were computed and
// on which threads; can sleep per example and throw on one example.
class RecordingDataset : public lt::Dataset {
 public:
  explicit RecordingDataset(int64_t n, milliseconds per_example = milliseconds(0))
      : data_(torch::randn({n, 3})), per_example_(per_example) {}
  int64_t size() const override { return data_.size(0); }
  Batch get(int64_t index) const override {
    if (per_example_.count() > 0) std::this_thread::sleep_for(per_example_);
    if (index == bad_index) {
      switch (throw_kind) {
        case Throw::kLtValueError:
          throw lt::ValueError(c10::str("sample ", index, " is corrupt"));
        case Throw::kC10IndexError:
          TORCH_CHECK_INDEX(false, "sample ", index, " is corrupt");
          break;
        case Throw::kOutOfRange:
          throw std::out_of_range(c10::str("sample ", index, " is corrupt"));
        case Throw::kInt:
          throw 42;
        case Throw::kNone:
          break;
      }
    }
    return {data_[index], torch::tensor(index)};
  }
  Batch get_batch(const std::vector<int64_t>& indices) const override {
    Batch batch = lt::Dataset::get_batch(indices);
    std::lock_guard<std::mutex> lock(mutex_);
    computed_.push_back(indices.front());
    threads_.insert(std::this_thread::get_id());
    return batch;
  }
  std::vector<int64_t> computed() const {
    std::lock_guard<std::mutex> lock(mutex_);
    return computed_;
  }
  bool computed_on(std::thread::id id) const {
    std::lock_guard<std::mutex> lock(mutex_);
    return threads_.count(id) > 0;
  }
  // Waits (deadline 20 s) until `n` batches were computed; false if they never were.
  bool wait_computed(size_t n) const {
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(20);
    while (computed().size() < n) {
      if (std::chrono::steady_clock::now() > deadline) return false;
      std::this_thread::sleep_for(milliseconds(1));
    }
    return true;
  }

  int64_t bad_index = -1;
  Throw throw_kind = Throw::kNone;

 private:
  torch::Tensor data_;
  milliseconds per_example_;
  mutable std::mutex mutex_;
  mutable std::vector<int64_t> computed_;  // first sample of each computed batch
  mutable std::set<std::thread::id> threads_;
};

void expect_same_batch(const Batch& got, const Batch& want, const std::string& where) {
  ASSERT_TRUE(got.data.defined() && got.target.defined()) << where;
  EXPECT_TRUE(torch::equal(got.data, want.data)) << where;
  EXPECT_TRUE(torch::equal(got.target, want.target)) << where;
}

TEST_F(DataLoaderWorkersTest, SameBatchesInTheSameOrderAsWithoutWorkers) {
  auto ds = std::make_shared<RecordingDataset>(37);
  auto tensors = std::make_shared<lt::TensorDataset>(torch::randn({37, 2}), torch::arange(37));
  for (const std::shared_ptr<lt::Dataset>& dataset : {std::static_pointer_cast<lt::Dataset>(ds),
                                                      std::static_pointer_cast<lt::Dataset>(tensors)}) {
    for (bool drop_last : {false, true}) {
      const auto base = lt::DataLoaderOptions(4).shuffle(true).seed(3).drop_last(drop_last);
      lt::DataLoader reference(dataset, base);
      for (int64_t workers : {1, 2, 4}) {
        for (int64_t prefetch : {1, 2, 3}) {
          auto options = base;
          lt::DataLoader loader(dataset, options.num_workers(workers).prefetch_factor(prefetch));
          ASSERT_EQ(loader.size(), reference.size());
          for (int64_t epoch = 0; epoch < 3; ++epoch) {
            reference.set_epoch(epoch);
            loader.set_epoch(epoch);
            for (int64_t i = 0; i < loader.size(); ++i) {
              expect_same_batch(loader.get(i), reference.get(i),
                                c10::str("workers ", workers, ", prefetch ", prefetch, ", drop_last ", drop_last,
                                         ", epoch ", epoch, ", batch ", i));
            }
          }
        }
      }
    }
  }
}

// for (const lt::Batch& batch : loader) gives the epoch's batches, as get(i) does, with workers too.
TEST_F(DataLoaderWorkersTest, RangeForGivesTheEpochsBatchesInOrder) {
  auto tensors = std::make_shared<lt::TensorDataset>(torch::randn({37, 2}), torch::arange(37));
  const auto base = lt::DataLoaderOptions(4).shuffle(true).seed(5);
  lt::DataLoader reference(tensors, base);
  for (int64_t workers : {0, 2}) {
    auto options = base;
    lt::DataLoader loader(tensors, options.num_workers(workers));
    for (int64_t epoch = 0; epoch < 2; ++epoch) {
      reference.set_epoch(epoch);
      loader.set_epoch(epoch);
      int64_t i = 0;
      for (const lt::Batch& batch : loader) {
        expect_same_batch(batch, reference.get(i), c10::str("workers ", workers, ", epoch ", epoch, ", batch ", i));
        ++i;
      }
      EXPECT_EQ(i, reference.size()) << "workers " << workers;
    }
  }
}

TEST_F(DataLoaderWorkersTest, JumpsRestartTheWindowAtTheRequestedBatch) {
  auto ds = std::make_shared<RecordingDataset>(40);
  lt::DataLoader reference(ds, lt::DataLoaderOptions(4).shuffle(true).seed(1));
  lt::DataLoader loader(ds, lt::DataLoaderOptions(4).shuffle(true).seed(1).num_workers(2));
  // Forward past the window [1, 4], back, the next, within the window (skipping 4), the last, back twice.
  for (int64_t i : {0, 5, 2, 3, 5, 9, 1, 0}) {
    expect_same_batch(loader.get(i), reference.get(i), c10::str("batch ", i));
  }
  // A new epoch while the window holds the old epoch's batches 1..4: the new epoch's batches.
  loader.set_epoch(1);
  reference.set_epoch(1);
  for (int64_t i : {1, 2, 0}) expect_same_batch(loader.get(i), reference.get(i), c10::str("epoch 1, batch ", i));
}

TEST_F(DataLoaderWorkersTest, PrefetchComputesTheNextBatchesWhileTheLoopWorks) {
  // 2 ms per example, batch 4, 4 workers, prefetch_factor 2: a window of 8 batches.
  auto ds = std::make_shared<RecordingDataset>(64, milliseconds(2));
  lt::DataLoader loader(ds, lt::DataLoaderOptions(4).num_workers(4).prefetch_factor(2));
  ASSERT_EQ(loader.size(), 16);
  loader.get(0);
  // While the loop "trains" on batch 0, the workers compute batches 1..8, and no more.
  ASSERT_TRUE(ds->wait_computed(9)) << "computed only " << ds->computed().size() << " batches";
  std::this_thread::sleep_for(milliseconds(30));
  EXPECT_EQ(ds->computed().size(), 9u) << "the window is 8 batches ahead of the loop";
  for (int64_t i = 1; i < loader.size(); ++i) {
    // After get(i - 1) the window reaches batch i + 7: once those are computed
    // (the loop "trains" meanwhile), batch i is there before get(i) asks for it.
    ASSERT_TRUE(ds->wait_computed(static_cast<size_t>(std::min<int64_t>(i + 8, 16))));
    const auto before = ds->computed();
    ASSERT_NE(std::find(before.begin(), before.end(), i * 4), before.end()) << "batch " << i;
    EXPECT_TRUE(torch::equal(loader.get(i).target, torch::arange(i * 4, i * 4 + 4))) << "batch " << i;
  }
  // Each batch computed once, all of them on worker threads.
  auto computed = ds->computed();
  std::sort(computed.begin(), computed.end());
  std::vector<int64_t> expected;
  for (int64_t i = 0; i < 16; ++i) expected.push_back(i * 4);
  EXPECT_EQ(computed, expected);
  EXPECT_FALSE(ds->computed_on(std::this_thread::get_id()));
}

TEST_F(DataLoaderWorkersTest, WorkerExceptionNamesTheBatchAndItsSamplesAndKeepsItsType) {
  auto ds = std::make_shared<RecordingDataset>(40);
  ds->bad_index = 29;  // batch 7: samples 28..31
  const std::string context = "DataLoader worker: epoch 0, batch 7 (samples 28..31): ";
  lt::DataLoader loader(ds, lt::DataLoaderOptions(4).num_workers(3));
  auto error_of_batch_7 = [&]() -> std::string {
    for (int64_t i = 0; i < loader.size(); ++i) {
      try {
        loader.get(i);
      } catch (...) {
        EXPECT_EQ(i, 7);
        throw;
      }
    }
    return "<no error>";
  };

  ds->throw_kind = Throw::kLtValueError;
  try {
    error_of_batch_7();
    FAIL() << "expected an error";
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), context + "sample 29 is corrupt");
  }

  ds->throw_kind = Throw::kC10IndexError;
  try {
    error_of_batch_7();
    FAIL() << "expected an error";
  } catch (const c10::IndexError& e) {
    EXPECT_EQ(lt::error_message(e), context + "sample 29 is corrupt");
  }

  ds->throw_kind = Throw::kOutOfRange;
  EXPECT_THROW(error_of_batch_7(), std::out_of_range);

  ds->throw_kind = Throw::kInt;
  try {
    error_of_batch_7();
    FAIL() << "expected an error";
  } catch (const std::runtime_error& e) {
    EXPECT_EQ(std::string(e.what()), context + "an exception that is not a std::exception");
  }

  // Still usable: the batches after it, before it, and the bad one again.
  EXPECT_TRUE(torch::equal(loader.get(8).target, torch::arange(32, 36)));
  EXPECT_TRUE(torch::equal(loader.get(0).target, torch::arange(0, 4)));
  EXPECT_THROW(loader.get(7), std::runtime_error);
  ds->throw_kind = Throw::kNone;
  EXPECT_TRUE(torch::equal(loader.get(7).target, torch::arange(28, 32)));
}

TEST_F(DataLoaderWorkersTest, ShuffledBatchErrorListsItsSamples) {
  auto ds = std::make_shared<RecordingDataset>(40);
  lt::DataLoader loader(ds, lt::DataLoaderOptions(4).shuffle(true).num_workers(2));
  const std::vector<int64_t> samples = loader.batch_indices(3);
  ds->bad_index = samples[2];
  ds->throw_kind = Throw::kLtValueError;
  try {
    loader.get(3);
    FAIL() << "expected an error";
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()), c10::str("DataLoader worker: epoch 0, batch 3 (samples ", samples[0], ", ",
                                              samples[1], ", ", samples[2], ", ", samples[3], "): sample ",
                                              samples[2], " is corrupt"));
  }
}

TEST_F(DataLoaderWorkersTest, NoThreadIsLeftBehind) {
  auto ds = std::make_shared<RecordingDataset>(40);
  const int64_t before = count_threads();
  {
    lt::DataLoader idle(ds, lt::DataLoaderOptions(4).num_workers(4));
    EXPECT_EQ(count_threads(), before) << "a loader never iterated starts no thread";
  }
  {  // A full epoch; set_epoch joins the workers, the next get() starts them again.
    lt::DataLoader loader(ds, lt::DataLoaderOptions(4).num_workers(4));
    for (int64_t i = 0; i < loader.size(); ++i) loader.get(i);
    EXPECT_EQ(count_threads(), before + 4);
    loader.set_epoch(1);
    EXPECT_EQ(count_threads(), before);
    loader.get(0);
    EXPECT_EQ(count_threads(), before + 4);
    loader.shutdown();
    EXPECT_EQ(count_threads(), before);
    loader.get(1);
  }
  EXPECT_EQ(count_threads(), before) << "after a full epoch";
  {  // Stopped mid-epoch, batches still being computed.
    auto slow = std::make_shared<RecordingDataset>(40, milliseconds(2));
    lt::DataLoader loader(slow, lt::DataLoaderOptions(4).num_workers(2).prefetch_factor(4));
    loader.get(0);
    loader.get(1);
  }
  EXPECT_EQ(count_threads(), before) << "after an early stop";
  {  // After a worker's exception.
    ds->bad_index = 5;
    ds->throw_kind = Throw::kLtValueError;
    lt::DataLoader loader(ds, lt::DataLoaderOptions(4).num_workers(4));
    loader.get(0);
    EXPECT_THROW(loader.get(1), lt::ValueError);
  }
  EXPECT_EQ(count_threads(), before) << "after an exception";
  {  // set_sampler joins too.
    lt::DataLoader loader(ds, lt::DataLoaderOptions(4).num_workers(2));
    loader.get(0);
    loader.set_sampler(std::make_shared<lt::SequentialSampler>(8));
    EXPECT_EQ(count_threads(), before);
    EXPECT_EQ(loader.size(), 2);
    EXPECT_TRUE(torch::equal(loader.get(0).target, torch::arange(0, 4)));
  }
  EXPECT_EQ(count_threads(), before) << "after set_sampler";
}

TEST_F(DataLoaderWorkersTest, PinMemoryPinsOnlyWithCuda) {
  auto ds = std::make_shared<RecordingDataset>(12);
  lt::DataLoader reference(ds, lt::DataLoaderOptions(4));
  for (int64_t workers : {0, 2}) {
    lt::DataLoader loader(ds, lt::DataLoaderOptions(4).pin_memory(true).num_workers(workers));
    for (int64_t i = 0; i < loader.size(); ++i) {
      Batch batch = loader.get(i);
      expect_same_batch(batch, reference.get(i), c10::str("workers ", workers, ", batch ", i));
      EXPECT_EQ(batch.data.is_pinned(), torch::cuda::is_available());
      EXPECT_EQ(batch.target.is_pinned(), torch::cuda::is_available());
    }
  }
}

TEST_F(DataLoaderWorkersTest, BatchesNeedNoGradAndTrainAsUsual) {
  auto ds = std::make_shared<RecordingDataset>(8);
  lt::DataLoader loader(ds, lt::DataLoaderOptions(4).num_workers(1));
  Batch batch = loader.get(0);
  EXPECT_FALSE(batch.data.requires_grad());
  EXPECT_FALSE(batch.data.is_inference());  // usable in a training step's autograd graph
  auto w = torch::ones({3, 1}, torch::requires_grad());
  batch.data.matmul(w).sum().backward();
  EXPECT_TRUE(torch::equal(w.grad(), batch.data.sum(0).unsqueeze(1)));
}

TEST(DataLoaderOptions, RejectsNegativeWorkersAndZeroPrefetch) {
  auto ds = std::make_shared<lt::TensorDataset>(torch::zeros({4, 1}));
  try {
    lt::DataLoader loader(ds, lt::DataLoaderOptions(2).num_workers(-1));
    FAIL() << "expected an error";
  } catch (const lt::ValueError& e) {
    EXPECT_STREQ(e.what(), "DataLoader: num_workers must be >= 0, got -1");
  }
  try {
    lt::DataLoader loader(ds, lt::DataLoaderOptions(2).num_workers(2).prefetch_factor(0));
    FAIL() << "expected an error";
  } catch (const lt::ValueError& e) {
    EXPECT_STREQ(e.what(), "DataLoader: prefetch_factor must be >= 1, got 0");
  }
}

class Regressor : public lt::LightningModule {
 public:
  Regressor() { fc = register_module("fc", torch::nn::Linear(3, 1)); }
  torch::Tensor training_step(const Batch& batch, int64_t) override {
    return torch::mse_loss(fc(batch.data).squeeze(1), batch.target.to(torch::kFloat));
  }
  void validation_step(const Batch& batch, int64_t) override {
    log("val_loss", torch::mse_loss(fc(batch.data).squeeze(1), batch.target.to(torch::kFloat)));
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.01));
  }
  torch::nn::Linear fc{nullptr};
};

// The trainer's loops (shuffled epochs, a validation pass mid-epoch and at
// its end, limits) give the same weights with workers as without.
TEST_F(DataLoaderWorkersTest, FitWithWorkersGivesTheSameWeights) {
  auto train = std::make_shared<RecordingDataset>(50);
  auto val = std::make_shared<RecordingDataset>(20);
  auto fit = [&](int64_t workers) {
    torch::manual_seed(0);
    auto model = std::make_shared<Regressor>();
    lt::Trainer trainer(lt::TrainerOptions()
                            .max_epochs(3)
                            .val_check_interval(0.5)
                            .limit_val_batches(3)
                            .enable_progress_bar(false)
                            .handle_signals(false));
    trainer.fit(model,
                std::make_shared<lt::DataLoader>(train, lt::DataLoaderOptions(4).shuffle(true).seed(2)
                                                            .num_workers(workers)),
                std::make_shared<lt::DataLoader>(val, lt::DataLoaderOptions(4).num_workers(workers)));
    return model->fc->weight.clone();
  };
  const int64_t before = count_threads();
  const auto without = fit(0);
  const auto with = fit(3);
  EXPECT_TRUE(torch::equal(without, with)) << without << with;
  EXPECT_EQ(count_threads(), before);
}

}  // namespace
