#pragma once
// A random-access loader over a map-style Dataset: the loops ask for batch i
// of the current epoch, which keeps limit_*_batches, resume and the
// distributed shard bookkeeping simple.
//
// With num_workers > 0, get(i) is served by a pool of worker threads that
// compute the batches after i while the loop trains on i (PyTorch's
// DataLoader workers, as threads). Invariants:
//   - batch i is always dataset->get_batch(batch_indices(i)) of the current
//     epoch and sampler: the same batches, in the same order, as with 0 workers;
//   - the window: while get(i) is served, batches i+1 .. i+num_workers*prefetch_factor
//     (clipped to the epoch) are queued or computed, never more; a get(j) other
//     than a batch in the window restarts the window at j;
//   - the threads start at the first get() of an epoch; set_epoch, set_sampler,
//     shutdown and the destructor drop the window, wait for the batches being
//     computed and join every thread, so no dataset code runs once they return;
//   - a worker's exception is rethrown by the get() of its batch, with the epoch,
//     batch and sample indices in front of its message.
// get() is called by one thread at a time for a loader (the loop's); the
// Dataset's get/get_batch are called from several worker threads at once.

#include <cstddef>
#include <cstdint>
#include <deque>
#include <iterator>
#include <memory>
#include <optional>
#include <utility>
#include <vector>

#include <torch/arg.h>

#include <lightning_cpp/core/options_table.h>
#include <lightning_cpp/core/types.h>
#include <lightning_cpp/data/batch_sampler.h>
#include <lightning_cpp/data/collate.h>
#include <lightning_cpp/data/dataset.h>
#include <lightning_cpp/data/iterable_dataset.h>
#include <lightning_cpp/data/sampler.h>

namespace lt {

// The options, each with its /// doc above its row: data/data_loader_options.def.
struct DataLoaderOptions {
  DataLoaderOptions() = default;
  DataLoaderOptions(int64_t batch_size) : batch_size_(batch_size) {}  // NOLINT
#define LT_OPTION LT_OPTION_ARG
#define LT_CPP_OPTION LT_CPP_OPTION_ARG
#include <lightning_cpp/data/data_loader_options.def>
#undef LT_OPTION
#undef LT_CPP_OPTION
};

// Batches of `batch_size` in `n` samples (the last one partial unless drop_last).
int64_t batch_count(int64_t n, int64_t batch_size, bool drop_last);

class DataLoader {
 public:
  DataLoader(std::shared_ptr<Dataset> dataset, DataLoaderOptions options);
  // Over a stream (data/iterable_dataset.h): batches are read in order, with
  // num_workers > 0 from a stream per worker thread; no sampler, batch
  // sampler or shuffle.
  DataLoader(std::shared_ptr<IterableDataset> stream, DataLoaderOptions options);
  ~DataLoader();
  DataLoader(const DataLoader&) = delete;
  DataLoader& operator=(const DataLoader&) = delete;

  // Number of batches in an epoch for the current sampler (or batch sampler);
  // over a stream, from its length, or kUnknownSize.
  static constexpr int64_t kUnknownSize = -1;
  int64_t size() const;
  // How many batches of an epoch `limit` (the limit_*_batches option `name`)
  // takes. Over a stream of unknown length: a count as is, 1.0 as every
  // batch (INT64_MAX: the loop finds the end); another fraction is refused.
  int64_t limited_size(const FractionOrCount& limit, const char* name) const;
  bool is_stream() const { return stream_dataset_ != nullptr; }
  // Whether batch `batch_idx` exists (over a stream: reads ahead to it).
  bool has_batch(int64_t batch_idx) const;
  // The rank whose stream this loader reads (the DDP strategy sets it).
  void set_stream_shard(StreamShard shard);
  const StreamShard& stream_shard() const { return shard_; }
  const std::shared_ptr<IterableDataset>& stream_dataset() const { return stream_dataset_; }
  // Over a stream: the rest of one epoch dealt out after a resume on another
  // world size (data/epoch_samples.h): in its epoch, the streams are its
  // slices; null: back to the dataset's. Stops the workers.
  void set_stream_remainder(std::shared_ptr<const StreamRemainder> rest);
  const std::shared_ptr<const StreamRemainder>& stream_remainder() const { return stream_rest_; }
  // Over a stream: how many examples loader worker `worker`'s stream of this
  // epoch yields, where the dataset tells (0 of 1 without workers).
  std::optional<int64_t> stream_length(int64_t worker) const;
  // Selects the epoch's index order; call before get(). Stops the workers.
  void set_epoch(int64_t epoch);
  // Batch `batch_idx` of the current epoch. With workers, logically const:
  // it only moves the prefetch window.
  Batch get(int64_t batch_idx) const;
  // for (const lt::Batch& batch : loader): the current epoch's batches in
  // order (set_epoch picks the epoch), as get(0), get(1)... until has_batch
  // says the epoch ended (over a stream, where it ends).
  class Iterator {
   public:
    using iterator_category = std::input_iterator_tag;
    using value_type = Batch;
    using difference_type = std::ptrdiff_t;
    using pointer = const Batch*;
    using reference = Batch;
    Iterator(const DataLoader* loader, int64_t batch_idx) : loader_(loader), batch_idx_(batch_idx) {}
    Batch operator*() const { return loader_->get(batch_idx_); }
    Iterator& operator++() {
      ++batch_idx_;
      return *this;
    }
    // Only against end(): whether this one has reached the epoch's end.
    bool operator!=(const Iterator& /*end*/) const { return loader_ != nullptr && loader_->has_batch(batch_idx_); }
    bool operator==(const Iterator& end) const { return !(*this != end); }

   private:
    const DataLoader* loader_;
    int64_t batch_idx_;
  };
  Iterator begin() const { return Iterator(this, 0); }
  Iterator end() const { return Iterator(nullptr, 0); }
  // The dataset indices of batch `batch_idx` (Lightning's batch_indices).
  std::vector<int64_t> batch_indices(int64_t batch_idx) const;
  // Drops the prefetched batches and joins the worker threads; the next get()
  // starts them again (over a stream, reopened at that batch). Nothing to do
  // without workers or before the first get().
  void shutdown();

  const std::shared_ptr<Dataset>& dataset() const { return dataset_; }
  const DataLoaderOptions& options() const { return options_; }
  const std::shared_ptr<Sampler>& sampler() const { return sampler_; }
  // Stops the workers.
  void set_sampler(std::shared_ptr<Sampler> sampler);
  // Batches from `batch_sampler` (their sizes and count) instead of the
  // sampler and batch_size; null: back to those. Stops the workers.
  void set_batch_sampler(std::shared_ptr<BatchSampler> batch_sampler);
  const std::shared_ptr<BatchSampler>& batch_sampler() const { return batch_sampler_; }
  // Samples in this epoch's batches.
  int64_t num_samples() const { return num_samples_; }

 private:
  class Workers;
  class StreamReader;

  Batch load(const std::vector<int64_t>& indices) const;
  // Over a stream: batch `batch_idx` of this epoch, read, or nullopt past the end.
  std::optional<Batch> stream_batch(int64_t batch_idx) const;
  // The shard of this rank's stream that loader worker `worker` reads.
  StreamShard worker_shard(int64_t worker) const;
  // This epoch's stream of loader worker `worker`.
  std::unique_ptr<ExampleStream> open_stream(int64_t worker) const;
  // Reads up to batch_size examples of `stream` into a batch; nullopt at its end.
  std::optional<Batch> read_batch(ExampleStream& stream) const;

  std::shared_ptr<Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
  std::shared_ptr<BatchSampler> batch_sampler_;
  int64_t epoch_ = 0;
  std::vector<std::vector<int64_t>> batches_;  // this epoch's, as dataset indices
  int64_t num_samples_ = 0;
  bool pin_ = false;  // pin_memory and CUDA available
  // Null without workers; with them, created with the loader (no thread yet).
  std::unique_ptr<Workers> workers_;
  // Over a stream: the dataset, this rank's shard, the open streams (and
  // their worker threads), and batches read ahead.
  std::shared_ptr<IterableDataset> stream_dataset_;
  StreamShard shard_;
  std::shared_ptr<const StreamRemainder> stream_rest_;
  mutable std::unique_ptr<StreamReader> reader_;
  mutable std::deque<std::pair<int64_t, std::optional<Batch>>> ahead_;
};

}  // namespace lt
