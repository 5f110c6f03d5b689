// The lightning-cpp command: config errors (exact messages, exit code 2,
// nothing written), overrides, --print_config, plugins loaded by path, and
// runs from YAML.
// This file: runs from YAML (cli/build_run.cpp): fit writes logs,
// config and checkpoint, ckpt_path best and last in every subcommand,
// predict, fast_dev_run, logger lists and logger: false.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <algorithm>
#include <fstream>
#include <iterator>
#include <map>
#include <regex>
#include <sstream>

#include <gtest/gtest.h>

#include <lightning_cpp/cli/cli.h>
#include <lightning_cpp/cli/register_builtins.h>
#include <lightning_cpp/core/registry.h>
#include <lightning_cpp/data/fashion_mnist.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/lr_scheduler.h>
#include <lightning_cpp/trainer/trainer.h>

#include "fashion_mnist/fashion_mnist.h"
#include "fashion_mnist/registration.h"
#include "support/cli_fixture.h"
#include "support/multiprocess.h"

namespace fs = std::filesystem;

namespace {

using lt::testing::CliResult;
using lt::testing::CliTest;
using lt::testing::TinyData;
using lt::testing::TinyNet;
using lt::testing::read_file;

// metrics.csv by column: each row's field ("" where the row has none).
std::map<std::string, std::vector<std::string>> metrics_columns(const fs::path& path) {
  std::ifstream csv(path);
  std::string line;
  std::vector<std::string> keys;
  if (std::getline(csv, line)) {
    for (std::stringstream header(line); std::getline(header, line, ',');) keys.push_back(line);
  }
  std::map<std::string, std::vector<std::string>> columns;
  while (std::getline(csv, line)) {
    std::vector<std::string> fields;
    for (std::stringstream row(line); std::getline(row, line, ',');) fields.push_back(line);
    for (size_t i = 0; i < keys.size(); ++i) columns[keys[i]].push_back(i < fields.size() ? fields[i] : "");
  }
  return columns;
}

// A column's non-empty values, as numbers.
std::vector<double> logged_values(const std::map<std::string, std::vector<std::string>>& columns,
                                  const std::string& key) {
  std::vector<double> out;
  if (const auto it = columns.find(key); it != columns.end()) {
    for (const auto& field : it->second) {
      if (!field.empty()) out.push_back(std::stod(field));
    }
  }
  return out;
}

TEST_F(CliTest, FitFromYamlWritesLogsConfigAndCheckpoint) {
  const std::string a = write("a.yaml",
                              "seed_everything: 3\ntrainer:\n  max_epochs: 2\n  enable_progress_bar: false\n"
                              "model: {class_path: TinyNet, init_args: {hidden: 8}}\ndata: TinyData\n"
                              "callbacks:\n  - class_path: ModelCheckpoint\n    init_args: {monitor: val_loss, save_last: true}\n");
  const CliResult r = cli({"fit", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  const fs::path v0 = dir_ / "lightning_logs" / "version_0";
  EXPECT_TRUE(fs::exists(v0 / "metrics.csv"));
  // The model's hparams with their types: hidden from init_args, an integer.
  EXPECT_EQ(read_file(v0 / "hparams.yaml"), "hidden: 8\n");
  EXPECT_TRUE(fs::exists(v0 / "config.yaml"));
  EXPECT_TRUE(fs::exists(v0 / "checkpoints" / "last.ckpt"));
  EXPECT_TRUE(fs::exists(v0 / "checkpoints" / "epoch=1-step=8.ckpt"));
  // The default loggers, Lightning's TensorBoardLogger beside the CSVLogger, in one folder.
  size_t event_files = 0;
  for (const auto& e : fs::directory_iterator(v0)) {
    event_files += e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_EQ(event_files, 1u);

  // test with the weights of a checkpoint in version_0: its metrics go there, beside it (no version_1); the next
  // fit to version_1.
  const CliResult t = cli({"test", "--config", a, "--ckpt_path", (v0 / "checkpoints" / "last.ckpt").string()});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("test_loss:"), std::string::npos) << t.out;
  EXPECT_NE(read_file(v0 / "metrics.csv").find("test_loss"), std::string::npos);
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs" / "version_1"));
  ASSERT_EQ(cli({"fit", "--config", a}).code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_1" / "config.yaml"));

  // validate the newest run's best model: a new process finds it in that
  // run's folder, and logs there (no version_2).
  const CliResult v = cli({"validate", "--config", a, "--ckpt_path", "best"});
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("val_loss:"), std::string::npos) << v.out;
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs" / "version_2"));
  const std::string best = (dir_ / "lightning_logs" / "version_1" / "checkpoints" / "epoch=1-step=8.ckpt").string();
  EXPECT_EQ(v.out, cli({"validate", "--config", a, "--ckpt_path", best}).out);
  EXPECT_NE(v.out, cli({"validate", "--config", a}).out) << "the untrained model validates alike";
}

// ckpt_path best and last in every subcommand with the default callbacks (no
// ModelCheckpoint in the config: one is added in every subcommand, as
// Lightning's Trainer adds it). Before a fit: a clear error. After it,
// validate, test and predict in a new process take the weights of that run's
// best and newest checkpoint (one file here: the default keeps the newest),
// and log beside it; fit resumes from it.
TEST_F(CliTest, CkptPathBestAndLastInEverySubcommand) {
  const std::string a = write("a.yaml", "seed_everything: 3\ntrainer:\n  max_epochs: 2\n  enable_progress_bar: false\n"
                                        "model: {class_path: TinyNet, init_args: {hidden: 8}}\ndata: TinyData\n");
  const fs::path logs = dir_ / "lightning_logs", v0 = logs / "version_0";
  for (const char* which : {"best", "last"}) {
    const CliResult r = cli({"test", "--config", a, std::string("--ckpt_path=") + which});
    EXPECT_EQ(r.code, 2) << r.err;
    const std::string expected = std::string("error: Trainer.test: ckpt_path: ") + which + ": no " + which +
                                 " checkpoint was found in './lightning_logs/version_0/checkpoints' (the "
                                 "ModelCheckpoint's dirpath: ";
    EXPECT_EQ(r.err.rfind(expected, 0), 0u) << r.err;
  }
  ASSERT_EQ(cli({"fit", "--config", a}).code, 0);
  const fs::path ckpt = v0 / "checkpoints" / "epoch=1-step=8.ckpt";
  ASSERT_TRUE(fs::exists(ckpt));
  fs::copy_file(ckpt, dir_ / "copy.ckpt");
  auto predictions = [&](const fs::path& folder) {
    const c10::IValue list = lt::pickle_load_file((folder / "predictions.pt").string());
    std::vector<torch::Tensor> batches;
    for (const c10::IValue& b : list.toListRef()) batches.push_back(b.toTensor());
    return torch::cat(batches);
  };
  std::map<std::string, std::string> out;
  std::map<std::string, torch::Tensor> predicted;
  for (const std::string which : {"best", "last"}) {
    for (const std::string subcommand : {"validate", "test", "predict"}) {
      const CliResult r = cli({subcommand, "--config", a, "--ckpt_path=" + which});
      ASSERT_EQ(r.code, 0) << subcommand << " " << which << ": " << r.err;
      out[subcommand + " " + which] = r.out;
    }
    predicted[which] = predictions(v0);
  }
  EXPECT_FALSE(fs::exists(logs / "version_1")) << "they log beside the fit";
  // fit goes on from the last checkpoint, in its folder.
  ASSERT_EQ(cli({"fit", "--config", a, "--ckpt_path=last", "--trainer.max_epochs=3"}).code, 0);
  EXPECT_TRUE(fs::exists(v0 / "checkpoints" / "epoch=2-step=12.ckpt"));
  EXPECT_FALSE(fs::exists(logs / "version_1"));

  // The same as with the file's path (each run logs to a new version).
  for (const std::string subcommand : {"validate", "test"}) {
    const CliResult r = cli({subcommand, "--config", a, "--ckpt_path", (dir_ / "copy.ckpt").string()});
    ASSERT_EQ(r.code, 0) << r.err;
    EXPECT_NE(r.out.find("_loss: "), std::string::npos) << r.out;
    EXPECT_EQ(out[subcommand + " best"], r.out) << subcommand;
    EXPECT_EQ(out[subcommand + " last"], r.out) << subcommand;
    EXPECT_NE(cli({subcommand, "--config", a}).out, r.out) << "the untrained model " << subcommand << "s alike";
  }
  ASSERT_EQ(cli({"predict", "--config", a, "--ckpt_path", (dir_ / "copy.ckpt").string()}).code, 0);
  const torch::Tensor from_path = predictions(logs / "version_5");
  EXPECT_TRUE(torch::equal(predicted["best"], from_path));
  EXPECT_TRUE(torch::equal(predicted["last"], from_path));
  ASSERT_EQ(cli({"predict", "--config", a}).code, 0);
  EXPECT_FALSE(torch::equal(predictions(logs / "version_6"), from_path)) << "the untrained model predicts alike";
}

TEST_F(CliTest, PredictWritesPredictions) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\ntrainer: {enable_progress_bar: false}\n");
  const CliResult r = cli({"predict", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "predictions.pt"));
}

// fast_dev_run: true as in Lightning's YAML (1 batch of each loop), and nothing written.
TEST_F(CliTest, FastDevRunTrueRunsOneBatchAndWritesNothing) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\ntrainer: {fast_dev_run: true}\n"
                                        "callbacks: [{class_path: ModelCheckpoint, init_args: {save_last: true}}]\n");
  const CliResult r = cli({"fit", "--config", a});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_EQ(listing(), std::vector<std::string>{"a.yaml"});
  const CliResult printed = cli({"fit", "--config", a, "--print_config"});
  EXPECT_NE(printed.out.find("fast_dev_run: 1"), std::string::npos) << printed.out;
  fs::remove(a);
  expect_config_error("model: TinyNet\ndata: TinyData\ntrainer: {fast_dev_run: maybe}\n",
                      "{f}:3: trainer.fast_dev_run: expected an integer or a boolean (true: 1), got 'maybe'");
}

// logger: a list of loggers (Lightning's), each with its own init_args; an empty list is an error.
TEST_F(CliTest, ALoggerListLogsToEach) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\ntrainer: {max_epochs: 1}\n"
                                        "logger:\n  - CSVLogger\n  - class_path: TensorBoardLogger\n"
                                        "    init_args: {name: tb}\n");
  const CliResult r = cli({"fit", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "metrics.csv"));
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "config.yaml")) << "the first logger's folder";
  bool events = false;
  for (const auto& e : fs::directory_iterator(dir_ / "tb" / "version_0")) {
    events = events || e.path().filename().string().rfind("events.out.tfevents.", 0) == 0;
  }
  EXPECT_TRUE(events);
  fs::remove_all(dir_ / "lightning_logs");
  fs::remove_all(dir_ / "tb");
  fs::remove(a);
  expect_config_error("model: TinyNet\ndata: TinyData\nlogger: []\n",
                      "{f}:3: logger: an empty list; say false for no logger");
}

// logger: false is Lightning's logger=False: no logger, not even the Trainer's default one.
TEST_F(CliTest, LoggerFalseLogsNothing) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\n"
                                        "trainer: {max_epochs: 1, enable_checkpointing: false}\nlogger: false\n");
  const CliResult r = cli({"fit", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs"));
  EXPECT_EQ(listing(), (std::vector<std::string>{"a.yaml", "config.yaml"})) << "config.yaml in the log_dir, the root";
}


// lr_scheduler: LightningCLI's top-level section: a registered scheduler made
// on the module's optimizer, stepped per step here, after a linear warm-up;
// LearningRateMonitor's rates are those of the same schedule built in C++
// (itself equal to PyTorch's: LRSchedulers.*).
TEST_F(CliTest, AnLrSchedulerFromYamlStepsTheModulesOptimizer) {
  const std::string a = write(
      "a.yaml",
      "model: {class_path: TinyNet, init_args: {lr: 0.05}}\ndata: TinyData\n"
      "trainer: {max_epochs: 2, log_every_n_steps: 1, enable_progress_bar: false, enable_checkpointing: false}\n"
      "callbacks: [{class_path: LearningRateMonitor, init_args: {logging_interval: step}}]\n"
      "lr_scheduler:\n  class_path: CosineAnnealingLR\n"
      "  init_args: {T_max: 6, eta_min: 0.001, interval: step, warmup_iters: 2, warmup_start_factor: 0.5}\n");
  const CliResult r = cli({"fit", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::vector<double> logged =
      logged_values(metrics_columns(dir_ / "lightning_logs" / "version_0" / "metrics.csv"), "lr-SGD");
  ASSERT_GE(logged.size(), 4u) << "lr-SGD not logged each step";
  auto p = torch::zeros({1}, torch::requires_grad());
  torch::optim::SGD sgd({p}, torch::optim::SGDOptions(0.05));
  lt::SequentialLR schedule(sgd, {std::make_shared<lt::LinearLR>(sgd, 0.5, 1.0, 2),
                                  std::make_shared<lt::CosineAnnealingLR>(sgd, 6, 0.001)},
                            {2});
  for (size_t i = 0; i < logged.size(); ++i) {
    EXPECT_NEAR(logged[i], lt::get_lr(sgd.param_groups()[0]), 1e-9) << "step " << i;
    schedule.step();
  }
  // A scheduler's required argument left out: a located error, nothing written.
  fs::remove_all(dir_ / "lightning_logs");
  fs::remove(a);
  fs::remove(dir_ / "config.yaml");
  const std::string bad = write("bad.yaml", "model: TinyNet\ndata: TinyData\nlr_scheduler: CosineAnnealingLR\n");
  const CliResult e = cli({"fit", "--config", bad});
  EXPECT_EQ(e.code, 2) << e.err;
  EXPECT_NE(e.err.find("T_max"), std::string::npos) << e.err;
}


// The monitors from YAML: ThroughputMonitor with its FLOPs measured and
// DeviceStatsMonitor write their keys into metrics.csv, with values.
TEST_F(CliTest, ThroughputAndDeviceStatsMonitorsFromYamlLogTheirKeys) {
  const std::string a = write(
      "a.yaml",
      "model: TinyNet\ndata: TinyData\n"
      "trainer: {max_epochs: 2, log_every_n_steps: 1, enable_progress_bar: false, enable_checkpointing: false}\n"
      "callbacks:\n"
      "  - {class_path: ThroughputMonitor, init_args: {window_size: 2, measure_flops: true, length: data}}\n"
      "  - DeviceStatsMonitor\n");
  const CliResult r = cli({"fit", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  const auto columns = metrics_columns(dir_ / "lightning_logs" / "version_0" / "metrics.csv");
  for (const char* key : {"train/device/samples_per_sec", "train/device/items_per_sec", "train/device/flops_per_sec",
                          "train/device/mfu", "DeviceStatsMonitor.on_train_batch_end/process_rss_bytes"}) {
    const std::vector<double> logged = logged_values(columns, key);
    ASSERT_FALSE(logged.empty()) << key << " not in metrics.csv";
    EXPECT_GT(logged.back(), 0.0) << key;
  }
}


// LearningRateFinder in a config (LightningCLI's): the sweep runs before fit,
// the model is built again with the suggestion as its lr init arg (the rate
// LearningRateMonitor then logs), and lr_find.svg is saved beside config.yaml.
// A model without an lr init arg is refused before anything runs (exit 2).
TEST_F(CliTest, LearningRateFinderFromYamlSetsTheModelsLr) {
  const std::string a = write(
      "a.yaml",
      "model: TinyNet\ndata: TinyData\n"
      "trainer: {max_epochs: 1, enable_progress_bar: false, enable_checkpointing: false}\n"
      "callbacks:\n"
      "  - {class_path: LearningRateFinder, init_args: {min_lr: 1.0e-4, max_lr: 1.0, num_training: 20}}\n"
      "  - {class_path: LearningRateMonitor, init_args: {logging_interval: epoch}}\n");
  const CliResult r = cli({"fit", "--config", a});
  ASSERT_EQ(r.code, 0) << r.err;
  const std::smatch m = [&] {
    std::smatch found;
    std::regex_search(r.out, found, std::regex("suggestion ([0-9.e+-]+) set as model.init_args.lr"));
    return found;
  }();
  ASSERT_EQ(m.size(), 2u) << r.out;
  const double suggested = std::stod(m[1].str());
  EXPECT_GT(suggested, 1e-4);
  EXPECT_LT(suggested, 1.0);
  const fs::path version = dir_ / "lightning_logs" / "version_0";
  EXPECT_TRUE(fs::exists(version / "lr_find.svg")) << "no plot beside config.yaml";
  const std::vector<double> rates = logged_values(metrics_columns(version / "metrics.csv"), "lr-SGD");
  ASSERT_EQ(rates.size(), 1u) << "lr-SGD not logged once";
  EXPECT_NEAR(rates[0], suggested, 1e-5 * suggested) << "the fit's rate is not the suggestion";

  const std::string bad = write(
      "bad.yaml", "model: TinyNet\ndata: TinyData\n"
                  "callbacks: [{class_path: LearningRateFinder, init_args: {attr_name: learning_rate}}]\n");
  const CliResult e = cli({"fit", "--config", bad});
  EXPECT_EQ(e.code, 2) << e.err;
  EXPECT_NE(e.err.find("callbacks[0].init_args: LearningRateFinder: the model TinyNet has no init arg "
                       "'learning_rate' to set the suggested learning rate to (its init args: hidden, lr)"),
            std::string::npos)
      << e.err;
}

}  // namespace
