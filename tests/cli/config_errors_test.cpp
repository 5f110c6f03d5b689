// The lightning-cpp command: config errors (exact messages, exit code 2,
// nothing written), overrides, --print_config, plugins loaded by path, and
// runs from YAML.
// This file: config errors, a dozen bad files (cli/config.h,
// cli/resolve_config.cpp, cli/internal/arguments.h): exact messages, exit code
// 2, nothing written.
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
                      "data, callbacks, logger, strategy, fit_loop, ckpt_path, plugins, lr_scheduler)");
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
                      "(registered callbacks: DeviceStatsMonitor, EarlyStopping, GradientAccumulationScheduler, "
                      "LearningRateFinder, LearningRateMonitor, ModelCheckpoint, ModelSummary, ProgressBar, "
                      "ThroughputMonitor, Timer)");
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
                      "seed_everything, trainer, model, data, callbacks, logger, strategy, fit_loop, ckpt_path, plugins, "
                      "lr_scheduler)",
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

}  // namespace
