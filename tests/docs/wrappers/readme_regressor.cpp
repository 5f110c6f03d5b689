// README.md's module, with a snippet of the README as the body of main(): the DDP example.
#include <lightning_cpp/lightning.h>

struct Regressor : lt::LightningModule {
  torch::nn::Linear fc{nullptr};
  Regressor() { fc = register_module("fc", torch::nn::Linear(4, 1)); }
  torch::Tensor training_step(const lt::Batch& batch, int64_t) override {
    auto loss = torch::mse_loss(fc(batch.data), batch.target);
    log("train_loss", loss, lt::LogOptions().prog_bar(true));
    return loss;
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), 0.1);
  }
};

int main() {
  // @SNIPPET@
}
