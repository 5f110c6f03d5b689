#pragma once
// Streaming datasets (PyTorch's IterableDataset): examples read in order, once
// per epoch, from files, a socket or a generator, in a number that may be
// unknown until the stream ends. Each rank opens its own stream
// (StreamShard: the DDP strategy passes its rank unless
// use_distributed_sampler is false; a dataset of per-rank files may ignore it).
//
// With DataLoader num_workers W > 0, each worker thread opens its own stream
// (StreamShard::worker of num_workers), as PyTorch's loader workers do: the
// dataset must give each worker its own part (e.g. every W-th file, or the
// examples i with i % shard.count() == shard.index()), or every example is
// read W times. The loader takes a batch from each worker in turn, skipping
// the workers whose stream has ended: an order set by the data, not timing.
//
// A DataLoader over one collates batch_size examples per batch and reads
// ahead by one batch, so the loops know the last batch. What needs a
// count before training — uneven_inputs pad and error, a fraction of the
// epoch (limit_train_batches, val_check_interval) — takes it from length()
// where the dataset gives one, and is refused otherwise; lockstep Join trains
// streams of any length (a rank that finds its end inside an accumulation
// window pads to the window's end and joins). A resumed epoch skips the
// examples of the batches already done (ExampleStream::skip); resumed on
// another world size, the rest of the epoch is dealt out (StreamRemainder,
// where length() tells). Validation,
// test and predict loaders may be streams too: they run to the stream's end
// (or their limit_*_batches count); under DDP, predict returns each rank's
// own predictions (a stream has no dataset order to merge them in).

#include <cstdint>
#include <memory>
#include <optional>
#include <vector>

#include <lightning_cpp/core/batch.h>

namespace lt {

struct StreamShard {
  int64_t rank = 0;
  int64_t num_replicas = 1;
  // The DataLoader worker that reads this stream (0 of 1 without workers).
  int64_t worker = 0;
  int64_t num_workers = 1;
  // This stream's part of the data among every rank's workers' parts:
  // index() of count(), rank-major.
  int64_t index() const { return rank * num_workers + worker; }
  int64_t count() const { return num_replicas * num_workers; }
};

class ExampleStream {
 public:
  virtual ~ExampleStream() = default;
  // The next example (tensors without the batch dimension), or nullopt at the end.
  virtual std::optional<Batch> next() = 0;
  // Skips up to `n` examples and returns how many there were (fewer at the
  // end); the default reads and drops them.
  virtual int64_t skip(int64_t n) {
    int64_t skipped = 0;
    while (skipped < n && next()) ++skipped;
    return skipped;
  }
};

class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  // The stream of rank `shard.rank` (and loader worker `shard.worker`) for `epoch`.
  virtual std::unique_ptr<ExampleStream> open(int64_t epoch, const StreamShard& shard) const = 0;
  // How many examples open(epoch, shard) yields, where the dataset can tell.
  virtual std::optional<int64_t> length(const StreamShard& /*shard*/) const { return std::nullopt; }
};

// The rest of one epoch of a stream after a resume on another world size
// (data/epoch_samples.h). The epoch's streams were opened with `layout`'s
// num_replicas and num_workers ("the epoch's streams": stream s of them is
// StreamShard{s / num_workers, num_replicas, s % num_workers, num_workers});
// what is left of them is `pieces`, in order: examples [begin, end) of
// stream `stream`. The rest is dealt out in contiguous slices: stream i of
// n (a shard's index() of count()) reads examples [i*R/n, (i+1)*R/n) of the
// pieces' R, each piece opened as the epoch's stream, skipped to its begin
// (ExampleStream::skip) and read to its end; the slices' lengths differ by
// one at most, which lockstep Join takes.
class StreamRemainder {
 public:
  struct Piece {
    int64_t stream = 0;
    int64_t begin = 0;
    int64_t end = 0;
  };
  StreamRemainder(std::shared_ptr<const IterableDataset> dataset, int64_t epoch, StreamShard layout,
                  std::vector<Piece> pieces);
  int64_t epoch() const { return epoch_; }
  const StreamShard& layout() const { return layout_; }
  const std::vector<Piece>& pieces() const { return pieces_; }
  // The pieces stream `shard` reads, in order.
  std::vector<Piece> slice(const StreamShard& shard) const;
  int64_t length(const StreamShard& shard) const;
  std::unique_ptr<ExampleStream> open(const StreamShard& shard) const;

 private:
  std::shared_ptr<const IterableDataset> dataset_;
  int64_t epoch_;
  StreamShard layout_;
  std::vector<Piece> pieces_;
  int64_t total_ = 0;
};

}  // namespace lt
