#include "fashion_mnist/fashion_mnist.h"

namespace lt::examples {

void FashionMnistDataModule::setup(Stage stage) {
  if (stage == Stage::kTrain || stage == Stage::kValidate) {
    if (!train_) {
      auto split = load_fashion_mnist(options_.data_dir(), /*train=*/true);
      const int64_t n = split.images.size(0), n_val = options_.val_size();
      // A fixed split, independent of the run's seed.
      auto perm = torch::tensor(seeded_permutation(n, 1234), torch::kLong);
      auto tr = perm.slice(0, 0, n - n_val), va = perm.slice(0, n - n_val, n);
      train_ = std::make_shared<TensorDataset>(split.images.index_select(0, tr), split.labels.index_select(0, tr));
      val_ = std::make_shared<TensorDataset>(split.images.index_select(0, va), split.labels.index_select(0, va));
    }
  } else if (!test_) {
    auto split = load_fashion_mnist(options_.data_dir(), /*train=*/false);
    test_ = std::make_shared<TensorDataset>(split.images, split.labels);
  }
}

std::shared_ptr<DataLoader> FashionMnistDataModule::train_dataloader() {
  return std::make_shared<DataLoader>(train_, DataLoaderOptions(options_.batch_size())
                                                      .shuffle(true)
                                                      .seed(options_.seed())
                                                      .num_workers(options_.num_workers()));
}

std::shared_ptr<DataLoader> FashionMnistDataModule::val_dataloader() {
  return val_ ? std::make_shared<DataLoader>(val_, DataLoaderOptions(256)) : nullptr;
}

std::shared_ptr<DataLoader> FashionMnistDataModule::test_dataloader() {
  if (!test_) setup(Stage::kTest);
  return std::make_shared<DataLoader>(test_, DataLoaderOptions(256));
}

torch::Tensor ClassifierBase::training_step(const Batch& batch, int64_t /*batch_idx*/) {
  auto loss = torch::cross_entropy_loss(forward(batch.data), batch.target);
  log("train_loss", loss, LogOptions().on_step(true).on_epoch(true).prog_bar(true));
  return loss;
}

void ClassifierBase::validation_step(const Batch& batch, int64_t /*batch_idx*/) {
  auto logits = forward(batch.data);
  log("val_loss", torch::cross_entropy_loss(logits, batch.target), LogOptions().prog_bar(true).sync_dist(true));
  log("val_acc", logits.argmax(1).eq(batch.target).to(torch::kFloat).mean(),
      LogOptions().prog_bar(true).sync_dist(true));
}

void ClassifierBase::test_step(const Batch& batch, int64_t /*batch_idx*/) {
  auto logits = forward(batch.data);
  log("test_loss", torch::cross_entropy_loss(logits, batch.target), LogOptions().sync_dist(true));
  log("test_acc", logits.argmax(1).eq(batch.target).to(torch::kFloat).mean(), LogOptions().sync_dist(true));
}

torch::Tensor ClassifierBase::predict_step(const Batch& batch, int64_t /*batch_idx*/) {
  return forward(batch.data).argmax(1);
}

OptimizerConfig ClassifierBase::configure_optimizers() {
  return std::make_shared<torch::optim::Adam>(
      parameters(), torch::optim::AdamOptions(options_.lr()).weight_decay(options_.weight_decay()));
}

MlpClassifier::MlpClassifier(ClassifierOptions options) : ClassifierBase(options) {
  fc1_ = register_module("fc1", torch::nn::Linear(28 * 28, options.hidden()));
  fc2_ = register_module("fc2", torch::nn::Linear(options.hidden(), options.hidden()));
  fc3_ = register_module("fc3", torch::nn::Linear(options.hidden(), 10));
  hparams()["hidden"] = options.hidden();
  hparams()["lr"] = options.lr();
}

torch::Tensor MlpClassifier::forward(torch::Tensor x) {
  x = x.flatten(1);
  x = torch::relu(fc1_(x));
  x = torch::relu(fc2_(x));
  return fc3_(x);
}

CnnClassifier::CnnClassifier(ClassifierOptions options) : ClassifierBase(options) {
  conv1_ = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
  conv2_ = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
  fc1_ = register_module("fc1", torch::nn::Linear(32 * 7 * 7, options.hidden()));
  fc2_ = register_module("fc2", torch::nn::Linear(options.hidden(), 10));
  hparams()["hidden"] = options.hidden();
  hparams()["lr"] = options.lr();
}

torch::Tensor CnnClassifier::forward(torch::Tensor x) {
  x = torch::max_pool2d(torch::relu(conv1_(x)), 2);
  x = torch::max_pool2d(torch::relu(conv2_(x)), 2);
  x = torch::relu(fc1_(x.flatten(1)));
  return fc2_(x);
}

}  // namespace lt::examples
