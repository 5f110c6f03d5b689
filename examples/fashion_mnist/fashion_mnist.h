#pragma once
// The Fashion-MNIST example: a data module and two LightningModules (an MLP
// and a small CNN). Used by the example binary, the CLI and the benchmarks.

#include <memory>
#include <string>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/data_module.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/fashion_mnist.h>

namespace lt::examples {

struct FashionMnistDataOptions {
  TORCH_ARG(std::string, data_dir) = kFashionMnistDir;
  TORCH_ARG(int64_t, batch_size) = 64;
  TORCH_ARG(int64_t, val_size) = 5000;  // held out of the 60000 training images
  TORCH_ARG(uint64_t, seed) = 0;
  // Loader worker threads for the training data (0: batches gathered on the loop's thread).
  TORCH_ARG(int64_t, num_workers) = 0;
};

class FashionMnistDataModule : public DataModule {
 public:
  explicit FashionMnistDataModule(FashionMnistDataOptions options = {}) : options_(std::move(options)) {
    LT_CHECK_VALUE(options_.val_size() >= 0 && options_.val_size() < 60000, "FashionMnistDataModule: val_size must be ",
                   "in [0, 60000) (images held out of the 60000 training images), got ", options_.val_size());
  }
  void setup(Stage stage) override;
  std::shared_ptr<DataLoader> train_dataloader() override;
  std::shared_ptr<DataLoader> val_dataloader() override;
  std::shared_ptr<DataLoader> test_dataloader() override;
  std::shared_ptr<DataLoader> predict_dataloader() override { return test_dataloader(); }

 private:
  FashionMnistDataOptions options_;
  std::shared_ptr<TensorDataset> train_, val_, test_;
};

struct ClassifierOptions {
  TORCH_ARG(int64_t, hidden) = 256;
  TORCH_ARG(double, lr) = 1e-3;
  TORCH_ARG(double, weight_decay) = 0.0;
};

// Shared steps of the two classifiers: cross-entropy, accuracy, Adam.
class ClassifierBase : public LightningModule {
 public:
  explicit ClassifierBase(ClassifierOptions options) : options_(options) {}
  virtual torch::Tensor forward(torch::Tensor x) = 0;
  torch::Tensor training_step(const Batch& batch, int64_t batch_idx) override;
  void validation_step(const Batch& batch, int64_t batch_idx) override;
  void test_step(const Batch& batch, int64_t batch_idx) override;
  torch::Tensor predict_step(const Batch& batch, int64_t batch_idx) override;
  OptimizerConfig configure_optimizers() override;

 protected:
  ClassifierOptions options_;
};

class MlpClassifier : public ClassifierBase {
 public:
  explicit MlpClassifier(ClassifierOptions options = {});
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr}, fc3_{nullptr};
};

class CnnClassifier : public ClassifierBase {
 public:
  explicit CnnClassifier(ClassifierOptions options = {});
  torch::Tensor forward(torch::Tensor x) override;

 private:
  torch::nn::Conv2d conv1_{nullptr}, conv2_{nullptr};
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

}  // namespace lt::examples
