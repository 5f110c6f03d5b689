// The lightning-cpp command: config errors (exact messages, exit code 2,
// nothing written), overrides, --print_config, plugins loaded by path, and
// runs from YAML.
// This file: plugins loaded by path (the registry itself:
// tests/registry_test.cpp): a model that trains from YAML, --help, another
// API version refused, errors naming the YAML line.
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

}  // namespace
