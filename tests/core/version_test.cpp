// lt::version() (core/version.h): CMake's project(VERSION), and what every
// checkpoint records as lightning_cpp_version.

#include <gtest/gtest.h>

#include <filesystem>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/version.h>
#include <lightning_cpp/trainer/trainer.h>

namespace {

class Line : public lt::LightningModule {
 public:
  Line() { fc = register_module("fc", torch::nn::Linear(2, 1)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override { return torch::mse_loss(fc(b.data), b.target); }
  lt::OptimizerConfig configure_optimizers() override {
    return lt::OptimizerConfig(std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1)));
  }
  torch::nn::Linear fc{nullptr};
};

TEST(Version, IsTheProjectVersionAndEveryCheckpointRecordsIt) {
  EXPECT_STREQ(lt::version(), LT_PROJECT_VERSION);
  const auto dir = std::filesystem::temp_directory_path() / ("lt_version_" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const std::string path = (dir / "last.ckpt").string();
  auto save = std::make_shared<lt::LambdaCallback>();
  save->on_train_end_fn = [path](lt::Trainer& trainer, lt::LightningModule&) { trainer.save_checkpoint(path); };
  lt::Trainer trainer(lt::TrainerOptions()
                          .callbacks({save})
                          .max_steps(1)
                          .enable_progress_bar(false)
                          .enable_model_summary(false)
                          .default_logger(false)
                          .default_root_dir(dir.string()));
  auto model = std::make_shared<Line>();
  auto rows = std::make_shared<lt::TensorDataset>(torch::randn({4, 2}), torch::randn({4, 1}));
  trainer.fit(model, std::make_shared<lt::DataLoader>(rows, lt::DataLoaderOptions(2)));
  EXPECT_EQ(lt::pickle_load_file(path).toGenericDict().at("lightning_cpp_version").toStringRef(), lt::version());
  std::filesystem::remove_all(dir);
}

}  // namespace
