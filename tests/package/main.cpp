// Trains a tiny model with an installed lightning-cpp; prints the loss drop.
#include <cstdio>

#include <lightning_cpp/trainer/trainer.h>

#include "data/dataset.h"     // the consumer's own, not lightning-cpp's
#include "trainer/trainer.h"  // likewise

struct Regressor : lt::LightningModule {
  torch::nn::Linear fc{nullptr};
  Regressor() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
  torch::Tensor training_step(const lt::Batch& batch, int64_t) override {
    return torch::mse_loss(fc(batch.data), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), 0.1);
  }
};

int main() {
  torch::manual_seed(0);
  auto x = torch::randn({64, 4}), y = x.sum(1, true);
  auto model = std::make_shared<Regressor>();
  const double before = torch::mse_loss(model->fc(x), y).item<double>();
  auto data = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y), lt::DataLoaderOptions(16));
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(20));
  trainer.fit(model, data);
  const double after = torch::mse_loss(model->fc(x), y).item<double>();
  consumer::Dataset own_data{64};
  consumer::Trainer own_trainer{20};
  std::printf("consumer: loss %.4f -> %.4f (own headers: %d rows, %d epochs)\n", before, after, own_data.rows,
              own_trainer.epochs);
  return after < 0.1 * before ? 0 : 1;
}
