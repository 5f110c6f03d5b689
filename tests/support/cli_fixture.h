#pragma once
// What the CLI tests share: a tiny model and data module registered as
// TinyNet and TinyData beside the built-ins, and a fixture that runs
// lt::cli::run in a fresh temporary folder (the cwd), so that "nothing
// written" can be checked by listing it.
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <memory>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/cli/cli.h>
#include <lightning_cpp/cli/register_builtins.h>
#include <lightning_cpp/core/data_module.h>
#include <lightning_cpp/core/lightning_module.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/dataset.h>

#include "support/seeding.h"

namespace lt::testing {

namespace fs = std::filesystem;

// A two-layer net on 4 features and the data it trains on.
class TinyNet : public lt::LightningModule {
 public:
  TinyNet(int64_t hidden, double lr) : lr_(lr) {
    fc1_ = register_module("fc1", torch::nn::Linear(4, hidden));
    fc2_ = register_module("fc2", torch::nn::Linear(hidden, 1));
    hparams()["hidden"] = hidden;
  }
  torch::Tensor forward(const torch::Tensor& x) { return fc2_(torch::relu(fc1_(x))); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    auto loss = torch::mse_loss(forward(b.data), b.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const lt::Batch& b, int64_t) override { log("val_loss", torch::mse_loss(forward(b.data), b.target)); }
  void test_step(const lt::Batch& b, int64_t) override { log("test_loss", torch::mse_loss(forward(b.data), b.target)); }
  torch::Tensor predict_step(const lt::Batch& b, int64_t) override { return forward(b.data); }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(lr_));
  }

 private:
  double lr_;
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

class TinyData : public lt::DataModule {
 public:
  void setup(lt::Stage) override {
    if (ds_) return;
    auto gen = at::detail::createCPUGenerator(7);
    auto x = at::randn({64, 4}, gen, torch::kFloat);
    ds_ = std::make_shared<lt::TensorDataset>(x, x.sum(1, true));
  }
  std::shared_ptr<lt::DataLoader> train_dataloader() override { return loader(); }
  std::shared_ptr<lt::DataLoader> val_dataloader() override { return loader(); }
  std::shared_ptr<lt::DataLoader> test_dataloader() override { setup(lt::Stage::kTest); return loader(); }
  std::shared_ptr<lt::DataLoader> predict_dataloader() override { return test_dataloader(); }

 private:
  std::shared_ptr<lt::DataLoader> loader() { return std::make_shared<lt::DataLoader>(ds_, lt::DataLoaderOptions(16)); }
  std::shared_ptr<lt::TensorDataset> ds_;
};

inline lt::Registry test_registry() {
  lt::Registry r;
  lt::register_builtins(r);
  r.add<lt::LightningModule>("TinyNet", "test net",
                             lt::ArgSchema().add_int("hidden", 4, "width").add_float("lr", 0.05, "SGD lr"),
                             [](const lt::InitArgs& a) { return std::make_shared<TinyNet>(a.get_int("hidden"), a.get_float("lr")); });
  r.add<lt::DataModule>("TinyData", "test data", lt::ArgSchema(),
                        [](const lt::InitArgs&) { return std::make_shared<TinyData>(); });
  return r;
}

struct CliResult {
  int code;
  std::string out, err;
};

// Each test runs in a fresh temporary folder (the cwd), so "nothing written"
// can be checked by listing it.
struct CliTest : lt::testing::SeedingFixture {
  void SetUp() override {
    SeedingFixture::SetUp();
    old_cwd_ = fs::current_path();
    char tmpl[] = "/tmp/lt_cli_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
    fs::current_path(dir_);
    registry_ = test_registry();
  }
  void TearDown() override {
    fs::current_path(old_cwd_);
    fs::remove_all(dir_);
  }
  std::string write(const std::string& name, const std::string& text) {
    std::ofstream(dir_ / name) << text;
    return (dir_ / name).string();
  }
  CliResult cli(std::vector<std::string> args) {
    std::ostringstream out, err;
    const int code = lt::cli::run(args, registry_, out, err);
    return {code, out.str(), err.str()};
  }
  std::vector<std::string> listing() const {
    std::vector<std::string> names;
    for (const auto& e : fs::recursive_directory_iterator(dir_)) names.push_back(fs::relative(e.path(), dir_).string());
    std::sort(names.begin(), names.end());
    return names;
  }
  // Runs `fit` on `yaml` and checks: exit 2, the exact message, nothing written.
  void expect_config_error(const std::string& yaml, const std::string& expected, std::vector<std::string> extra = {}) {
    const std::string path = write("bad.yaml", yaml);
    std::vector<std::string> args = {"fit", "--config", path};
    args.insert(args.end(), extra.begin(), extra.end());
    const CliResult r = cli(args);
    EXPECT_EQ(r.code, 2) << r.err;
    std::string message = std::regex_replace(expected, std::regex("\\{f\\}"), path);
    EXPECT_EQ(r.err, "error: " + message + "\n");
    EXPECT_EQ(listing(), std::vector<std::string>{"bad.yaml"});
  }

  fs::path old_cwd_, dir_;
  lt::Registry registry_;
};

}  // namespace lt::testing
