// loggers/mlflow.h: what MLflowLogger writes is read back by MLflow's own
// client (tests/python/mlflow_reader.py, MLflow 3.17 with
// MLFLOW_ALLOW_FILE_STORE=true): the run's name, status, params, tags, every
// metric's history by step (the values the CSVLogger of the same run wrote, an
// independent record) and an artifact; a resume into the same run drops what
// was logged after its checkpoint's step.
#include <filesystem>
#include <fstream>
#include <map>
#include <sstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/loggers/logger_collection.h>
#include <lightning_cpp/loggers/mlflow.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/command.h"

using namespace lt::testing;

namespace fs = std::filesystem;

namespace {

std::vector<std::string> read_with_mlflow(const fs::path& store, int& rc) {
  return command_lines("MLFLOW_ALLOW_FILE_STORE=true " + std::string(LT_PYTHON) + " -W ignore " + LT_SOURCE_DIR +
                           "/tests/python/mlflow_reader.py '" + store.string() + "' lightning_logs",
                       rc);
}

// The "metric train_loss <step> <value>" lines, as (step, value).
std::vector<std::pair<int64_t, double>> history(const std::vector<std::string>& lines, const std::string& key) {
  std::vector<std::pair<int64_t, double>> out;
  for (const auto& line : lines) {
    std::istringstream words(line);
    std::string kind, name;
    int64_t step = 0;
    double value = 0;
    if (words >> kind >> name >> step >> value && kind == "metric" && name == key) out.emplace_back(step, value);
  }
  return out;
}

std::string joined(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += l + "\n";
  return out;
}

TEST_F(CallbacksTest, MLflowsOwnClientReadsWhatMLflowLoggerWrote) {
  ASSERT_EQ(std::system((std::string(LT_PYTHON) + " -c 'import mlflow' > /dev/null 2>&1").c_str()), 0)
      << LT_PYTHON << " has no mlflow package (scripts/install-deps.sh installs mlflow-skinny)";
  const fs::path store = dir_ / "mlruns";
  auto mlflow = std::make_shared<lt::MLflowLogger>(
      lt::MLflowLoggerOptions().save_dir(store.string()).run_name("first").tags({{"team", "robotics"}}));
  auto csv = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  auto model = std::make_shared<ScriptedModule>(std::vector<double>{0.5, 0.25});
  model->hparams()["lr"] = 0.1;
  model->hparams()["width"] = int64_t{2};
  lt::Trainer trainer(options(2).log_every_n_steps(1).logger(
      std::make_shared<lt::LoggerCollection>(std::vector<std::shared_ptr<lt::Logger>>{csv, mlflow})));
  trainer.fit(model, loader(), loader());
  mlflow->log_artifact((fs::path(csv->log_dir()) / "metrics.csv").string(), "tables");
  EXPECT_EQ(mlflow->log_dir(), (store / mlflow->name() / mlflow->run_id()).string());

  int rc = -1;
  const std::vector<std::string> lines = read_with_mlflow(store, rc);
  ASSERT_EQ(rc, 0) << joined(lines);
  const std::string all = joined(lines);
  EXPECT_NE(all.find("run " + mlflow->run_id() + " FINISHED first\n"), std::string::npos) << all;
  EXPECT_NE(all.find("param lr 0.1\nparam width 2\n"), std::string::npos) << all;
  EXPECT_NE(all.find("tag mlflow.runName first\ntag team robotics\n"), std::string::npos) << all;
  EXPECT_NE(all.find("artifact tables\n"), std::string::npos) << all;
  // train_loss: every step, as the CSVLogger of the same run recorded it.
  std::ifstream in(fs::path(csv->log_dir()) / "metrics.csv");
  std::string line;
  std::getline(in, line);
  std::vector<std::string> keys;
  for (std::stringstream header(line); std::getline(header, line, ',');) keys.push_back(line);
  const size_t loss = std::find(keys.begin(), keys.end(), "train_loss") - keys.begin();
  const size_t step = std::find(keys.begin(), keys.end(), "step") - keys.begin();
  ASSERT_LT(loss, keys.size());
  ASSERT_LT(step, keys.size());
  std::vector<std::pair<int64_t, double>> expected;
  while (std::getline(in, line)) {
    std::vector<std::string> fields;
    for (std::stringstream row(line); std::getline(row, line, ',');) fields.push_back(line);
    if (loss < fields.size() && !fields[loss].empty()) {
      expected.emplace_back(std::stoll(fields[step]), std::stod(fields[loss]));
    }
  }
  const auto logged = history(lines, "train_loss");
  ASSERT_EQ(logged.size(), 8u) << all;  // 2 epochs of 4 steps
  ASSERT_EQ(logged.size(), expected.size()) << all;
  for (size_t i = 0; i < logged.size(); ++i) {
    EXPECT_EQ(logged[i].first, expected[i].first);
    EXPECT_NEAR(logged[i].second, expected[i].second, 1e-12 * std::abs(expected[i].second)) << i;
  }
  EXPECT_EQ(history(lines, "val_loss").size(), 2u) << all;

  // Resumed from a checkpoint of step 5: the run goes on, steps 6-8 as the interrupted run logged them are gone.
  auto resumed = std::make_shared<lt::MLflowLogger>(lt::MLflowLoggerOptions().save_dir(store.string()));
  resumed->continue_previous();
  lt::StateDict state = lt::new_state_dict();
  state.insert("run_id", mlflow->run_id());
  state.insert("step", int64_t{5});
  resumed->load_state_dict(state);
  EXPECT_EQ(resumed->run_id(), mlflow->run_id());
  resumed->log_metrics({{"train_loss", 99.0}}, 6);
  resumed->finalize("failed");
  const auto again = read_with_mlflow(store, rc);
  ASSERT_EQ(rc, 0) << joined(again);
  const auto after = history(again, "train_loss");
  ASSERT_EQ(after.size(), 6u) << joined(again);
  EXPECT_EQ(after.back(), (std::pair<int64_t, double>{6, 99.0}));
  EXPECT_NE(joined(again).find("run " + mlflow->run_id() + " FAILED first\n"), std::string::npos) << joined(again);

  EXPECT_THROW(lt::MLflowLogger(lt::MLflowLoggerOptions().tracking_uri("http://localhost:5000")), lt::ValueError);
  EXPECT_THROW(lt::MLflowLogger(lt::MLflowLoggerOptions().run_id("not-a-run")), lt::ValueError);
}

}  // namespace
