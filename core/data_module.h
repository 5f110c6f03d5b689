#pragma once
// lt::DataModule: where the data of a run comes from (Lightning's
// LightningDataModule). Loaders are created on every rank; the strategy then
// replaces their sampler (DDP shards the training set).

#include <cstdint>
#include <memory>

#include <lightning_cpp/core/types.h>

namespace lt {

// Declared in data/data_loader.h, a layer above: core only names it (include
// that header to build one).
class DataLoader;

class DataModule {
 public:
  virtual ~DataModule() = default;
  // Runs once per node before setup (downloads, decompression); rank-local.
  virtual void prepare_data() {}
  virtual void setup(Stage /*stage*/) {}
  virtual std::shared_ptr<DataLoader> train_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> val_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> test_dataloader() { return nullptr; }
  virtual std::shared_ptr<DataLoader> predict_dataloader() { return nullptr; }
  virtual HParams hparams() const { return {}; }

  // This process's place among the ranks (Lightning's trainer.global_rank,
  // local_rank, world_size), set by the Trainer before prepare_data and
  // setup: per-rank data (files chosen by rank) reads them in setup().
  int64_t global_rank() const { return global_rank_; }
  int64_t local_rank() const { return local_rank_; }
  int64_t world_size() const { return world_size_; }
  void set_ranks(int64_t global_rank, int64_t local_rank, int64_t world_size) {
    global_rank_ = global_rank;
    local_rank_ = local_rank;
    world_size_ = world_size;
  }

 private:
  int64_t global_rank_ = 0;
  int64_t local_rank_ = 0;
  int64_t world_size_ = 1;
};

}  // namespace lt
