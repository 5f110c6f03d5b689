// docs/distributed.md's per-rank data: each rank builds its own dataset (rank 0: 20 samples, rank 1: 12),
// then the snippet makes the loader and the Trainer; trained here under DDP with lockstep Join.
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

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
  const int64_t rows = lt::rank_zero_env_rank() == 0 ? 20 : 12;
  auto x = torch::randn({rows, 4});
  auto my_rank_dataset = std::make_shared<lt::TensorDataset>(x, x.sum(1, true));
  // @SNIPPET@
  trainer.fit(std::make_shared<Regressor>(), loader);
}
