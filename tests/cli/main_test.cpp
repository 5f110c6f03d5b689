// The lightning-cpp command: config errors (exact messages, exit code 2,
// nothing written), overrides, --print_config, plugins loaded by path, and
// runs from YAML.
// This file: the real program (cli/main.cpp and a user's program
// on lt::cli::main, LT_FASHION_MNIST_CLI) run as a user runs it.
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
  // On two ranks, the library's lines begin with the user's program's name, not lightning-cpp's.
  const std::string ddp = std::string(LT_FASHION_MNIST_CLI) + " fit --config " + LT_SOURCE_DIR +
                          "/configs/fashion_mnist_mlp.yaml --trainer.max_epochs=1 --trainer.limit_train_batches=4 "
                          "--trainer.limit_val_batches=1 --trainer.num_sanity_val_steps=0 --trainer.devices=2 "
                          "--trainer.default_root_dir=ddp > ddp.txt 2>&1";
  ASSERT_EQ(std::system(ddp.c_str()), 0) << read_file((dir_ / "ddp.txt").string());
  const std::string ddp_out = read_file((dir_ / "ddp.txt").string());
  EXPECT_NE(ddp_out.find("fashion_mnist_cli: strategy ddp: launching 2 worker processes"), std::string::npos)
      << ddp_out;
  EXPECT_NE(ddp_out.find("fashion_mnist_cli: strategy ddp: gloo process group of 2 ranks"), std::string::npos)
      << ddp_out;
  EXPECT_EQ(ddp_out.find("lightning-cpp:"), std::string::npos) << ddp_out;
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

}  // namespace
