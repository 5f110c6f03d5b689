#pragma once
// Streaming datasets (PyTorch's IterableDataset): examples read in order, once
// per epoch, from files, a socket or a generator, in a number that may be
// unknown until the stream ends. Each rank opens its own stream
// (StreamShard: the DDP strategy passes its rank unless
// use_distributed_sampler is false; a dataset of per-rank files may ignore it).
//
// A DataLoader over one collates batch_size examples per batch and reads
// ahead by one batch, so the training loop knows its last batch. What needs a
// count before training — uneven_inputs pad and error, a fraction of the
// epoch (limit_train_batches, val_check_interval) — takes it from length()
// where the dataset gives one, and is refused otherwise; lockstep Join trains
// streams of any length (a rank that finds its end inside an accumulation
// window pads to the window's end and joins). A resumed epoch skips the
// examples of the batches already done (ExampleStream::skip).

#include <cstdint>
#include <memory>
#include <optional>

#include <lightning_cpp/core/batch.h>

namespace lt {

struct StreamShard {
  int64_t rank = 0;
  int64_t num_replicas = 1;
};

class ExampleStream {
 public:
  virtual ~ExampleStream() = default;
  // The next example (tensors without the batch dimension), or nullopt at the end.
  virtual std::optional<Batch> next() = 0;
  // Skips `n` examples; the default reads and drops them.
  virtual void skip(int64_t n) {
    for (int64_t i = 0; i < n && next(); ++i) {
    }
  }
};

class IterableDataset {
 public:
  virtual ~IterableDataset() = default;
  // The stream of rank `shard.rank` for `epoch`.
  virtual std::unique_ptr<ExampleStream> open(int64_t epoch, const StreamShard& shard) const = 0;
  // How many examples open(epoch, shard) yields, where the dataset can tell.
  virtual std::optional<int64_t> length(const StreamShard& /*shard*/) const { return std::nullopt; }
};

}  // namespace lt
