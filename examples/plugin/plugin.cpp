// An example lightning-cpp plugin: a shared library that adds a model and a
// data module to the registry, for configs/plugin.yaml:
//
//   lightning-cpp fit --config configs/plugin.yaml \
//       --plugin build/examples/plugin/liblt_example_plugin.so
//
// The library exports one extern "C" function, lightning_cpp_plugin_info(),
// returning the plugin API version it was built with and its registration
// function (LLVM's llvmGetPassPluginInfo pattern). Nothing registers itself
// from a static constructor.

#include <torch/torch.h>

#include <lightning_cpp/core/data_module.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/data/data_loader.h>

namespace {

// y = x . w + b + noise, with a fixed w; a linear model recovers it.
class SyntheticRegressionData : public lt::DataModule {
 public:
  SyntheticRegressionData(int64_t num_samples, int64_t features, int64_t batch_size, uint64_t seed)
      : num_samples_(num_samples), features_(features), batch_size_(batch_size), seed_(seed) {}

  void setup(lt::Stage /*stage*/) override {
    if (train_) return;
    auto gen = at::detail::createCPUGenerator(seed_);
    auto w = torch::arange(1, features_ + 1, torch::kFloat) / static_cast<double>(features_);
    auto make = [&](int64_t n) {
      auto x = at::randn({n, features_}, gen, torch::kFloat);
      auto y = x.matmul(w).unsqueeze(1) + 0.5 + 0.01 * at::randn({n, 1}, gen, torch::kFloat);
      return std::make_shared<lt::TensorDataset>(x, y);
    };
    train_ = make(num_samples_);
    val_ = make(std::max<int64_t>(num_samples_ / 4, 1));
  }
  std::shared_ptr<lt::DataLoader> train_dataloader() override {
    return std::make_shared<lt::DataLoader>(train_, lt::DataLoaderOptions(batch_size_).shuffle(true).seed(seed_));
  }
  std::shared_ptr<lt::DataLoader> val_dataloader() override {
    return std::make_shared<lt::DataLoader>(val_, lt::DataLoaderOptions(batch_size_));
  }
  std::shared_ptr<lt::DataLoader> test_dataloader() override {
    setup(lt::Stage::kTest);
    return val_dataloader();
  }
  std::shared_ptr<lt::DataLoader> predict_dataloader() override { return test_dataloader(); }

 private:
  int64_t num_samples_, features_, batch_size_;
  uint64_t seed_;
  std::shared_ptr<lt::TensorDataset> train_, val_;
};

class LinearRegressor : public lt::LightningModule {
 public:
  LinearRegressor(int64_t features, double lr) : lr_(lr) {
    linear_ = register_module("linear", torch::nn::Linear(features, 1));
    hparams()["features"] = features;
    hparams()["lr"] = lr;
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    auto loss = torch::mse_loss(linear_(batch.data), batch.target);
    log("train_loss", loss, lt::LogOptions().prog_bar(true));
    return loss;
  }
  void validation_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    log("val_loss", torch::mse_loss(linear_(batch.data), batch.target), lt::LogOptions().prog_bar(true));
  }
  void test_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    log("test_loss", torch::mse_loss(linear_(batch.data), batch.target));
  }
  torch::Tensor predict_step(const lt::Batch& batch, int64_t /*batch_idx*/) override { return linear_(batch.data); }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_));
  }

 private:
  double lr_;
  torch::nn::Linear linear_{nullptr};
};

void register_example_plugin(lt::Registry& registry) {
  registry.add<lt::LightningModule>(
      "LinearRegressor", "a linear model trained with SGD on MSE (example plugin)",
      lt::ArgSchema().add_int("features", 8, "input features").add_float("lr", 0.1, "SGD learning rate"),
      [](const lt::InitArgs& a) {
        LT_CHECK_VALUE(a.get_int("features") >= 1, "features must be >= 1, got ", a.get_int("features"));
        return std::make_shared<LinearRegressor>(a.get_int("features"), a.get_float("lr"));
      });
  registry.add<lt::DataModule>(
      "SyntheticRegressionData", "random linear-regression data (example plugin)",
      lt::ArgSchema()
          .add_int("num_samples", 256, "training samples")
          .add_int("features", 8, "input features")
          .add_int("batch_size", 32, "batch size")
          .add_int("seed", 0, "data seed"),
      [](const lt::InitArgs& a) {
        return std::make_shared<SyntheticRegressionData>(a.get_int("num_samples"), a.get_int("features"),
                                                         a.get_int("batch_size"),
                                                         static_cast<uint64_t>(a.get_int("seed")));
      });
}

}  // namespace

extern "C" const lt::PluginInfo* lightning_cpp_plugin_info() {
  static const lt::PluginInfo info{lt::kPluginApiVersion, "example", "0.1.0", &register_example_plugin};
  return &info;
}
