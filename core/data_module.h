#pragma once
// lt::DataModule: where the data of a run comes from (Lightning's
// LightningDataModule). Loaders are created on every rank; the strategy then
// replaces their sampler (DDP shards the training set).

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
};

}  // namespace lt
