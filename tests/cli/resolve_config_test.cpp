// The lightning-cpp command: config errors (exact messages, exit code 2,
// nothing written), overrides, --print_config, plugins loaded by path, and
// runs from YAML.
// This file: resolution and overrides (cli/resolve_config.cpp,
// cli/internal/trainer_section.h): --print_config, the trainer's aliases,
// the ddp and Fashion-MNIST configs, an integer mapping argument.
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
