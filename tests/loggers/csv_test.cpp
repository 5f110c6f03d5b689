// loggers/csv.h: the CSVLogger writes Lightning's layout (metrics.csv with an
// epoch column, hparams.yaml that PyYAML reads back with its types, as
// Lightning's load_hparams_from_yaml does), checkpoints beside the logs.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <fstream>
#include <iterator>
#include <map>
#include <sstream>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/loggers/console.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(CallbacksTest, CsvLoggerWritesLightningsLayout) {
  lt::CSVLogger logger(lt::CSVLoggerOptions(dir_.string()).flush_logs_every_n_steps(1));
  EXPECT_EQ(logger.log_dir(), (dir_ / "lightning_logs" / "version_0").string());
  EXPECT_FALSE(fs::exists(dir_ / "lightning_logs"));  // nothing before the first write
  logger.log_hyperparams({{"hidden", 128}, {"lr", 0.001}});
  logger.log_metrics({{"train_loss", 0.5}}, 0);
  logger.log_metrics({{"train_loss", 0.25}, {"val_loss", 0.75}}, 1);  // a new column: header rewritten
  logger.save();
  std::ifstream csv(dir_ / "lightning_logs" / "version_0" / "metrics.csv");
  std::stringstream ss;
  ss << csv.rdbuf();
  EXPECT_EQ(ss.str(), "step,train_loss,val_loss\n0,0.5,\n1,0.25,0.75\n");
  std::ifstream hp(dir_ / "lightning_logs" / "version_0" / "hparams.yaml");
  std::stringstream hs;
  hs << hp.rdbuf();
  EXPECT_EQ(hs.str(), "hidden: 128\nlr: 0.001\n");
  // The next logger takes the next version.
  lt::CSVLogger next(lt::CSVLoggerOptions(dir_.string()));
  EXPECT_EQ(next.version(), 1);
}

// As Lightning's logger connector: every row the Trainer logs carries the
// epoch it was logged in (an integer column), validation rows and a
// validate after the fit too.
TEST_F(CallbacksTest, MetricsCsvHasAnEpochColumn) {
  auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  lt::Trainer trainer(options(2).logger(logger).log_every_n_steps(2));
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{3, 2});
  trainer.fit(module, loader(), loader());  // 4 steps per epoch
  trainer.validate(module, loader());
  std::ifstream csv(dir_ / "lightning_logs" / "version_0" / "metrics.csv");
  std::string line;
  std::getline(csv, line);
  EXPECT_EQ(line, "epoch,step,train_loss,val_loss");
  // epoch, step and val_loss of each row (train_loss varies with the data).
  std::vector<std::string> rows;
  while (std::getline(csv, line)) {
    std::vector<std::string> cells;
    std::stringstream ls(line);
    for (std::string c; std::getline(ls, c, ',');) cells.push_back(c);
    cells.resize(4);
    rows.push_back(cells[0] + "," + cells[1] + "," + cells[3]);
  }
  EXPECT_EQ(rows, (std::vector<std::string>{"0,2,", "0,4,", "0,4,3.0", "1,6,", "1,8,", "1,8,2.0", "2,8,2.0"}));
}

// hparams.yaml as Lightning's loggers write it (PyYAML): read back by PyYAML,
// numbers are numbers (1e-7 exactly, not the string '1e-07'), bools are
// bools, and a string that looks like a number or a bool stays a string.
TEST_F(CallbacksTest, HparamsYamlKeepsTheirTypes) {
  lt::CSVLogger logger(lt::CSVLoggerOptions(dir_.string()));
  logger.log_hyperparams({{"lr", 1e-7},
                          {"third", 1.0 / 3.0},
                          {"tenth", 0.1},
                          {"whole", 256.0},
                          {"big", 1e16},
                          {"neg", -2.5},
                          {"inf", std::numeric_limits<double>::infinity()},
                          {"hidden", 256},
                          {"seed", int64_t{9007199254740993}},
                          {"amsgrad", true},
                          {"bias", false},
                          {"width", "8"},
                          {"flag", "true"},
                          {"yes", "yes"},
                          {"none", "null"},
                          {"exp", "1e-07"},
                          {"half", "-.5"},
                          {"name", "adam w"},
                          {"empty", ""},
                          {"colon", "a: b"}});
  const fs::path yaml = dir_ / "lightning_logs" / "version_0" / "hparams.yaml";
  // Each key's Python type and repr, as yaml.safe_load reads the file.
  const std::string cmd = "/usr/bin/python3 -c 'import sys, yaml\n"
                          "for k, v in sorted(yaml.safe_load(open(sys.argv[1])).items()): print(k, type(v).__name__, "
                          "repr(v))' " + yaml.string() + " 2>&1";
  std::string out;
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  char buf[4096];
  for (size_t n; (n = std::fread(buf, 1, sizeof(buf), pipe)) > 0;) out.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0) << out << "(PyYAML: apt-get install python3-yaml)";
  EXPECT_EQ(out,
            "amsgrad bool True\n"
            "bias bool False\n"
            "big float 1e+16\n"
            "colon str 'a: b'\n"
            "empty str ''\n"
            "exp str '1e-07'\n"
            "flag str 'true'\n"
            "half str '-.5'\n"
            "hidden int 256\n"
            "inf float inf\n"
            "lr float 1e-07\n"
            "name str 'adam w'\n"
            "neg float -2.5\n"
            "none str 'null'\n"
            "seed int 9007199254740993\n"
            "tenth float 0.1\n"
            "third float 0.3333333333333333\n"
            "whole float 256.0\n"
            "width str '8'\n"
            "yes str 'yes'\n")
      << "hparams.yaml:\n"
      << std::string(std::istreambuf_iterator<char>(std::ifstream(yaml).rdbuf()), {});
}

TEST_F(CallbacksTest, TrainerWithCsvLoggerPutsCheckpointsBesideTheLogs) {
  auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  auto mc = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer trainer(options(1).callbacks({mc}).logger(logger).log_every_n_steps(1));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  const fs::path v0 = dir_ / "lightning_logs" / "version_0";
  EXPECT_TRUE(fs::exists(v0 / "metrics.csv"));
  EXPECT_EQ(files(v0 / "checkpoints"), std::vector<std::string>{"epoch=0-step=4.ckpt"});
}

}  // namespace
