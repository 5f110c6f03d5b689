// The lightning-cpp command: config errors (exact messages, exit code 2,
// nothing written), overrides, --print_config, plugins loaded by path, and
// runs from YAML.
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
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

const char* kTrainerKeys =
    "max_epochs, max_steps, accumulate_grad_batches, gradient_clip_val, gradient_clip_algorithm, "
    "val_check_interval, check_val_every_n_epoch, limit_train_batches, limit_val_batches, "
    "limit_test_batches, limit_predict_batches, num_sanity_val_steps, fast_dev_run, overfit_batches, "
    "deterministic, precision, default_root_dir, accelerator, devices, num_nodes, uneven_inputs, join_enable, "
    "join_throw_on_early_termination, join_divide_by_initial_world_size, on_nonfinite, profiler, handle_signals, "
    "log_every_n_steps, enable_progress_bar, enable_model_summary, use_distributed_sampler, "
    "enable_checkpointing";

// -- config errors: a dozen bad files ---------------------------------------------------------

TEST_F(CliTest, UnknownTrainerKeySuggestsTheClosest) {
  expect_config_error("trainer:\n  max_epoch: 3\nmodel: TinyNet\ndata: TinyData\n",
                      std::string("{f}:2: trainer.max_epoch: unknown key; did you mean 'max_epochs'? (valid keys: ") +
                          kTrainerKeys + ")");
}

TEST_F(CliTest, WrongTypeNamesExpectedType) {
  expect_config_error("trainer:\n  max_epochs: three\nmodel: TinyNet\ndata: TinyData\n",
                      "{f}:2: trainer.max_epochs: expected an integer, got 'three'");
}

TEST_F(CliTest, QuotedNumberIsAString) {
  expect_config_error("trainer:\n  max_epochs: \"3\"\nmodel: TinyNet\ndata: TinyData\n",
                      "{f}:2: trainer.max_epochs: expected an integer, got '\"3\"' (a quoted string)");
}

TEST_F(CliTest, UnknownModelClassListsRegistered) {
  expect_config_error("model:\n  class_path: TinyNett\ndata: TinyData\n",
                      "{f}:2: model.class_path: unknown model 'TinyNett'; did you mean 'TinyNet'? (registered models: TinyNet)");
}

TEST_F(CliTest, UnknownTopLevelKey) {
  expect_config_error("trainers:\n  max_epochs: 1\nmodel: TinyNet\ndata: TinyData\n",
                      "{f}:1: trainers: unknown key; did you mean 'trainer'? (valid keys: seed_everything, trainer, model, "
                      "data, callbacks, logger, strategy, fit_loop, ckpt_path, plugins)");
}

TEST_F(CliTest, UnknownInitArg) {
  expect_config_error("model:\n  class_path: TinyNet\n  init_args:\n    hiden: 8\ndata: TinyData\n",
                      "{f}:4: model.init_args.hiden: unknown key; did you mean 'hidden'? (valid keys: hidden, lr)");
}

TEST_F(CliTest, BadChoiceSuggestsValid) {
  expect_config_error(
      "model: TinyNet\ndata: TinyData\ncallbacks:\n  - class_path: EarlyStopping\n    init_args:\n      mode: maximum\n",
      "{f}:6: callbacks[0].init_args.mode: expected one of min, max, got 'maximum'; did you mean 'max'?");
}

TEST_F(CliTest, UnknownCallbackClass) {
  expect_config_error("model: TinyNet\ndata: TinyData\ncallbacks:\n  - class_path: EarlyStoping\n",
                      "{f}:4: callbacks[0].class_path: unknown callback 'EarlyStoping'; did you mean 'EarlyStopping'? "
                      "(registered callbacks: EarlyStopping, GradientAccumulationScheduler, LearningRateMonitor, "
                      "ModelCheckpoint, ModelSummary, ProgressBar, Timer)");
}

TEST_F(CliTest, FloatArgRejectsWord) {
  expect_config_error("model:\n  class_path: TinyNet\n  init_args: {lr: fast}\ndata: TinyData\n",
                      "{f}:3: model.init_args.lr: expected a number, got 'fast'");
}

TEST_F(CliTest, BoolArgRejectsWord) {
  expect_config_error("trainer:\n  enable_progress_bar: maybe\nmodel: TinyNet\ndata: TinyData\n",
                      "{f}:2: trainer.enable_progress_bar: expected a boolean (true/false), got 'maybe'");
}

TEST_F(CliTest, MissingModel) {
  expect_config_error("data: TinyData\n",
                      "{f}:1: model: missing; 'fit' needs a model: {class_path: <name>, init_args: {...}} (registered "
                      "models: TinyNet)");
}

TEST_F(CliTest, OutOfRangeValueNamesItsLine) {
  expect_config_error("model: TinyNet\ndata: TinyData\ntrainer:\n  max_epochs: -5\n",
                      "{f}:4: trainer.max_epochs must be >= -1 (-1: unlimited), got -5");
}

TEST_F(CliTest, UnknownStrategy) {
  expect_config_error("model: TinyNet\ndata: TinyData\nstrategy: single_devise\n",
                      "{f}:3: strategy: unknown strategy 'single_devise'; did you mean 'single_device'? (registered "
                      "strategies: " + c10::Join(", ", registry_.names<lt::Strategy>()) + ")");
}

TEST_F(CliTest, FsdpStateDictTypeChoiceSuggestsValid) {
  expect_config_error("model: TinyNet\ndata: TinyData\nstrategy:\n  class_path: fsdp\n  init_args:\n"
                      "    state_dict_type: shardd\n",
                      "{f}:6: strategy.init_args.state_dict_type: expected one of full, sharded, got 'shardd'; "
                      "did you mean 'sharded'?");
}

TEST_F(CliTest, CallbacksMustBeAList) {
  expect_config_error("model: TinyNet\ndata: TinyData\ncallbacks:\n  class_path: EarlyStopping\n",
                      "{f}:4: callbacks: expected a list of {class_path, init_args}, got a mapping");
}

TEST_F(CliTest, DuplicateKey) {
  expect_config_error("model: TinyNet\ndata: TinyData\ntrainer:\n  max_epochs: 1\n  max_epochs: 2\n",
                      "{f}:5: trainer.max_epochs: duplicate key (also on line 4)");
}

TEST_F(CliTest, CommandLineOverrideIsChecked) {
  expect_config_error("model: TinyNet\ndata: TinyData\n",
                      "command line '--trainer.max_epochs=abc': trainer.max_epochs: expected an integer, got 'abc'",
                      {"--trainer.max_epochs=abc"});
}

TEST_F(CliTest, CommandLineUnknownSection) {
  expect_config_error("model: TinyNet\ndata: TinyData\n",
                      "command line '--trainr.max_epochs=1': unknown key; did you mean 'trainer'? (valid keys: "
                      "seed_everything, trainer, model, data, callbacks, logger, strategy, fit_loop, ckpt_path, plugins)",
                      {"--trainr.max_epochs=1"});
}

TEST_F(CliTest, FactoryErrorGetsTheClassLocation) {
  expect_config_error(
      "model: TinyNet\ndata: TinyData\ncallbacks:\n  - class_path: Timer\n    init_args: {duration: '1:xx'}\n",
      "{f}:4: callbacks[0].init_args: Timer: duration '1:xx' is not of the form DD:HH:MM:SS");
}

TEST_F(CliTest, MissingCheckpointFile) {
  expect_config_error("model: TinyNet\ndata: TinyData\nckpt_path: nowhere.ckpt\n",
                      "{f}:3: ckpt_path: 'nowhere.ckpt' does not exist (or say last or best)");
}

TEST_F(CliTest, InvalidYaml) {
  const std::string path = write("bad.yaml", "trainer: [1, 2\nmodel: TinyNet\n");
  const CliResult r = cli({"fit", "--config", path});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err.rfind("error: " + path + ":", 0), 0u) << r.err;
  EXPECT_NE(r.err.find("invalid YAML"), std::string::npos) << r.err;
}

TEST_F(CliTest, MissingConfigFile) {
  const CliResult r = cli({"fit", "--config", "nope.yaml"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: nope.yaml: cannot read config file (does it exist?)\n");
}

TEST_F(CliTest, UnknownOptionIsUsageError) {
  const CliResult r = cli({"fit", "stray"});
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.err.find("unexpected argument"), std::string::npos) << r.err;
}

// -- resolution, overrides ------------------------------------------------------------------------

TEST_F(CliTest, PrintConfigShowsEveryDefaultAndWritesNothing) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\ntrainer: {max_epochs: 5}\n");
  const std::string b = write("b.yaml", "trainer: {max_epochs: 7, devices: 1}\nmodel: {init_args: {hidden: 9}}\n");
  const CliResult r = cli({"fit", "--config", a, "--config", b, "--model.init_args.lr", "0.5", "--print_config"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("max_epochs: 7"), std::string::npos) << r.out;    // b overrides a
  EXPECT_NE(r.out.find("hidden: 9"), std::string::npos) << r.out;        // merged into the shorthand class
  EXPECT_NE(r.out.find("lr: 0.5"), std::string::npos) << r.out;          // command line last
  EXPECT_NE(r.out.find("limit_train_batches: 1.0"), std::string::npos);  // defaults filled in
  EXPECT_NE(r.out.find("class_path: single_device"), std::string::npos);
  EXPECT_NE(r.out.find("class_path: CSVLogger"), std::string::npos);
  EXPECT_EQ(listing(), (std::vector<std::string>{"a.yaml", "b.yaml"}));
  // The printed config is itself a valid config that resolves to the same thing.
  const std::string printed = write("printed.yaml", r.out);
  const CliResult again = cli({"fit", "--config", printed, "--print_config"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);
}

TEST_F(CliTest, TrainerAliasesAndConflicts) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\ntrainer:\n  strategy: single_device\n  "
                                        "callbacks: [EarlyStopping]\n");
  CliResult r = cli({"fit", "--config", a, "--print_config"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("class_path: EarlyStopping"), std::string::npos) << r.out;
  const std::string b = write("b.yaml", "model: TinyNet\ndata: TinyData\nstrategy: single_device\ntrainer:\n  "
                                        "strategy: single_device\n");
  r = cli({"fit", "--config", b});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, "error: " + b + ":5: trainer.strategy: given twice: here and as top-level 'strategy' (" + b +
                       ":3); keep one\n");
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

  // test with the checkpoint's weights (its metrics go to version_1); the next fit to version_2.
  const CliResult t = cli({"test", "--config", a, "--ckpt_path", (v0 / "checkpoints" / "last.ckpt").string()});
  ASSERT_EQ(t.code, 0) << t.err;
  EXPECT_NE(t.out.find("test_loss:"), std::string::npos) << t.out;
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_1" / "metrics.csv"));
  ASSERT_EQ(cli({"fit", "--config", a}).code, 0);
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_2" / "config.yaml"));

  // validate the newest run's best model: a new process finds it in that
  // run's folder, and logs there (no version_3).
  const CliResult v = cli({"validate", "--config", a, "--ckpt_path", "best"});
  ASSERT_EQ(v.code, 0) << v.err;
  EXPECT_NE(v.out.find("val_loss:"), std::string::npos) << v.out;
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs" / "version_3"));
  const std::string best = (dir_ / "lightning_logs" / "version_2" / "checkpoints" / "epoch=1-step=8.ckpt").string();
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

// -- plugins (the registry itself: tests/registry_test.cpp)
// ---------------------------------------------------------------------

TEST_F(CliTest, PluginByPathRegistersAModelThatTrainsFromYaml) {
  const std::string plugin = LT_EXAMPLE_PLUGIN;
  EXPECT_FALSE(registry_.contains<lt::LightningModule>("LinearRegressor"));
  const std::string config = std::string(LT_SOURCE_DIR) + "/configs/plugin.yaml";
  const CliResult r = cli({"fit", "--config", config, "--plugins=[" + plugin + "]", "--trainer.max_epochs=5"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_TRUE(registry_.contains<lt::LightningModule>("LinearRegressor"));
  EXPECT_TRUE(registry_.contains<lt::DataModule>("SyntheticRegressionData"));
  EXPECT_EQ(registry_.plugins(), std::vector<std::string>{plugin});
  // The model learned: val_loss of the last epoch well under the first.
  std::ifstream csv(dir_ / "lightning_logs" / "version_0" / "metrics.csv");
  std::string header, line;
  std::getline(csv, header);
  std::vector<std::string> cols;
  std::stringstream hs(header);
  for (std::string c; std::getline(hs, c, ',');) cols.push_back(c);
  const size_t val_col = std::find(cols.begin(), cols.end(), "val_loss") - cols.begin();
  ASSERT_LT(val_col, cols.size()) << header;
  std::vector<double> val;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    if (val_col < cells.size() && !cells[val_col].empty()) val.push_back(std::stod(cells[val_col]));
  }
  ASSERT_EQ(val.size(), 5u);
  EXPECT_LT(val.back(), val.front()) << val.front() << " -> " << val.back();
  EXPECT_LT(val.back(), 0.05) << val.front() << " -> " << val.back();
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"));
  // Loading the same plugin again (YAML and --plugin) is a no-op, not a duplicate.
  EXPECT_NO_THROW(registry_.load_plugin(plugin));
}

TEST_F(CliTest, HelpListsWhatPluginsRegister) {
  const CliResult r = cli({"--plugin", LT_EXAMPLE_PLUGIN, "--help"});
  EXPECT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("LinearRegressor - a linear model"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("EarlyStopping"), std::string::npos);
  EXPECT_NE(r.out.find("fit"), std::string::npos);
}

TEST_F(CliTest, PluginWithAnotherApiVersionIsRefused) {
  const CliResult r = cli({"fit", "--plugin", LT_WRONG_VERSION_PLUGIN, "--print_config"});
  EXPECT_EQ(r.code, 2);
  EXPECT_EQ(r.err, std::string("error: plugin '") + LT_WRONG_VERSION_PLUGIN +
                       "' was built for lightning-cpp plugin API version 999, but this lightning-cpp has plugin API "
                       "version " + std::to_string(lt::kPluginApiVersion) +
                       "; rebuild the plugin against this lightning-cpp\n");
  EXPECT_FALSE(registry_.contains<lt::LightningModule>("WrongVersionModel"));
}

TEST_F(CliTest, PluginErrorsInYamlNameTheLine) {
  expect_config_error("plugins:\n  - missing/libnope.so\nmodel: TinyNet\ndata: TinyData\n",
                      "{f}:2: plugins[0]: plugin 'missing/libnope.so' does not exist or is not a file");
  // A shared library without the entry point.
  lt::Registry r;
  EXPECT_THROW(r.load_plugin(LT_LIGHTNING_CPP_LIBRARY), lt::ValueError);
}

// -- the real program -----------------------------------------------------------------------------

TEST_F(CliTest, ProgramRunsFashionMnistConfig) {
  if (!fs::exists(std::string(lt::kFashionMnistDir) + "/train-images-idx3-ubyte.gz")) GTEST_SKIP() << "no Fashion-MNIST";
  const std::string cmd = std::string(LT_FASHION_MNIST_CLI) + " fit --config " + LT_SOURCE_DIR +
                          "/configs/fashion_mnist_mlp.yaml --trainer.max_epochs=1 --trainer.limit_train_batches=20 "
                          "--trainer.limit_val_batches=2 --trainer.num_sanity_val_steps=0 > out.txt 2>&1";
  const int rc = std::system(cmd.c_str());
  std::ifstream f(dir_ / "out.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  ASSERT_EQ(rc, 0) << ss.str();
  EXPECT_NE(ss.str().find("Epoch 0"), std::string::npos) << ss.str();  // plain progress line (not a TTY)
  EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "checkpoints" / "last.ckpt"));
  // A config error from the real program: exit code 2.
  write("bad.yaml", "trainer: {max_epochs: x}\n");
  EXPECT_EQ(WEXITSTATUS(std::system((std::string(LT_FASHION_MNIST_CLI) + " fit -c bad.yaml 2>/dev/null").c_str())), 2);
}

// A user's program built on lt::cli::main names itself in --help, not lightning-cpp.
TEST_F(CliTest, AUsersProgramNamesItselfInHelp) {
  const std::string cmd = std::string(LT_FASHION_MNIST_CLI) + " --help > help.txt 2>&1";
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  std::ifstream f(dir_ / "help.txt");
  std::stringstream ss;
  ss << f.rdbuf();
  EXPECT_NE(ss.str().find("fashion_mnist_cli: train, validate, test or predict from YAML configs"), std::string::npos)
      << ss.str();
  EXPECT_EQ(ss.str().find("lightning-cpp: train"), std::string::npos) << ss.str();
}

TEST_F(CliTest, DdpConfigResolves) {
  lt::examples::register_fashion_mnist(registry_);
  if (!registry_.contains<lt::Strategy>("ddp")) GTEST_SKIP() << "the ddp strategy is not registered in this build";
  const CliResult r = cli({"fit", "--config", std::string(LT_SOURCE_DIR) + "/configs/fashion_mnist_ddp.yaml", "--print_config"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("class_path: ddp"), std::string::npos) << r.out;
}

// trainer.uneven_inputs and trainer.join_* are aliases of the ddp strategy's init_args.
TEST_F(CliTest, TrainerUnevenInputsMovesIntoTheDdpStrategy) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\nstrategy: ddp\n"
                                        "trainer: {uneven_inputs: pad, join_enable: false}\n");
  const CliResult r = cli({"fit", "--config", a, "--print_config"});
  ASSERT_EQ(r.code, 0) << r.err;
  const size_t strategy = r.out.find("class_path: ddp");
  ASSERT_NE(strategy, std::string::npos) << r.out;
  EXPECT_NE(r.out.find("uneven_inputs: pad", strategy), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("join_enable: false", strategy), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("uneven_inputs: ~"), std::string::npos) << r.out;  // the trainer's alias, moved
  // The printed config loads back as it is.
  const std::string printed = write("printed.yaml", r.out);
  const CliResult again = cli({"fit", "--config", printed, "--print_config"});
  ASSERT_EQ(again.code, 0) << again.err;
  EXPECT_EQ(again.out, r.out);

  const std::string both = write("both.yaml", "model: TinyNet\ndata: TinyData\n"
                                              "strategy: {class_path: ddp, init_args: {uneven_inputs: join}}\n"
                                              "trainer: {uneven_inputs: pad}\n");
  const CliResult twice = cli({"fit", "--config", both, "--print_config"});
  EXPECT_EQ(twice.code, 2);
  EXPECT_NE(twice.err.find("trainer.uneven_inputs"), std::string::npos) << twice.err;
  EXPECT_NE(twice.err.find("given twice"), std::string::npos) << twice.err;
  // With one process the alias has nothing to set and changes nothing.
  const std::string single = write("single.yaml", "model: TinyNet\ndata: TinyData\ntrainer: {uneven_inputs: pad}\n");
  EXPECT_EQ(cli({"fit", "--config", single, "--print_config"}).code, 0);
}

TEST_F(CliTest, FashionMnistConfigsResolve) {
  lt::examples::register_fashion_mnist(registry_);
  const CliResult r = cli({"fit", "--config", std::string(LT_SOURCE_DIR) + "/configs/fashion_mnist_mlp.yaml", "--print_config"});
  ASSERT_EQ(r.code, 0) << r.err;
  EXPECT_NE(r.out.find("class_path: MlpClassifier"), std::string::npos) << r.out;
}

}  // namespace

namespace {

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

}  // namespace

namespace {

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

}  // namespace

namespace {

// GradientAccumulationScheduler's scheduling is a YAML mapping of integers.
TEST_F(CliTest, AnIntegerMappingArgument) {
  const std::string a = write("a.yaml", "model: TinyNet\ndata: TinyData\ntrainer: {max_epochs: 2}\ncallbacks:\n"
                                        "  - class_path: GradientAccumulationScheduler\n"
                                        "    init_args: {scheduling: {0: 1, 1: 2}}\n");
  const CliResult printed = cli({"fit", "--config", a, "--print_config"});
  ASSERT_EQ(printed.code, 0) << printed.err;
  EXPECT_NE(printed.out.find("scheduling:\n"), std::string::npos) << printed.out;
  EXPECT_NE(printed.out.find("1: 2\n"), std::string::npos) << printed.out;
  EXPECT_EQ(cli({"fit", "--config", a}).code, 0);
  fs::remove_all(dir_ / "lightning_logs");
  fs::remove(a);
  expect_config_error("model: TinyNet\ndata: TinyData\ncallbacks:\n  - class_path: GradientAccumulationScheduler\n"
                      "    init_args: {scheduling: {x: 2}}\n",
                      "{f}:5: callbacks[0].init_args.scheduling: expected integer keys and values, got x: '2'");
}

}  // namespace
