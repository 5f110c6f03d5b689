// loggers/logger_collection.h through the Trainer: the default logger (CSV
// and TensorBoard in one version folder, as Lightning's Trainer() logs to
// TensorBoard by default) and the DataModule's hparams logged with the
// module's, as Lightning's _log_hyperparams.
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
#include <lightning_cpp/plugins/io/torch_plugin.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

// -- loggers ------------------------------------------------------------------------------------

// Lightning's Trainer() logs to TensorBoard by default (logger=True); default_logger(false)
// is its logger=False, and fast_dev_run writes nothing.
// The default logger is the CLI's, CSV and TensorBoard, in one version folder
// (the collection fixes both versions before either writes).
TEST_F(CallbacksTest, TheTrainerLogsToCsvAndTensorBoardInOneFolderByDefault) {
  auto events = [](const fs::path& d) {
    std::vector<std::string> out;
    if (!fs::exists(d)) return out;
    for (const auto& e : fs::directory_iterator(d)) {
      if (e.path().filename().string().rfind("events.out.tfevents.", 0) == 0) out.push_back(e.path().string());
    }
    return out;
  };
  {
    lt::Trainer trainer(options(1));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
    EXPECT_EQ(trainer.log_dir(), (dir_ / "lightning_logs" / "version_0").string());
    EXPECT_EQ(events(dir_ / "lightning_logs" / "version_0").size(), 1u);
    EXPECT_TRUE(fs::exists(dir_ / "lightning_logs" / "version_0" / "metrics.csv"));
  }
  {
    lt::Trainer trainer(options(1).default_logger(false));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
    EXPECT_EQ(trainer.log_dir(), dir_.string());
  }
  {
    lt::Trainer trainer(options(1).fast_dev_run(1));
    trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  }
  EXPECT_EQ(files(dir_ / "lightning_logs"), std::vector<std::string>{"version_0"}) << "only the first run logged";
}

// As Lightning's _log_hyperparams: the DataModule's hparams are logged with
// the module's; a key both have with different values is an error naming it.
TEST_F(CallbacksTest, TheDataModulesHparamsAreLoggedWithTheModules) {
  class Data : public lt::DataModule {
   public:
    explicit Data(lt::HParams hparams) : hparams_(std::move(hparams)) {}
    std::shared_ptr<lt::DataLoader> train_dataloader() override { return loader(); }
    lt::HParams hparams() const override { return hparams_; }

   private:
    lt::HParams hparams_;
  };
  auto module = [] {
    auto m = std::make_shared<ScriptedModule>(std::vector<double>{1});
    m->hparams()["lr"] = 0.1;
    m->hparams()["batch_size"] = 2;
    return m;
  };
  auto csv = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()));
  auto checkpoint =
      std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()));
  lt::Trainer trainer(options(1).logger(csv).callbacks({checkpoint}));
  trainer.fit(module(), std::make_shared<Data>(lt::HParams{{"batch_size", 2}, {"root", "/data"}}));
  EXPECT_EQ(lt::testing::read_file(fs::path(csv->log_dir()) / "hparams.yaml"), "batch_size: 2\nlr: 0.1\nroot: /data\n");
  // The checkpoint keeps both, each under its own key (Lightning's hyper_parameters, datamodule_hyper_parameters).
  const auto saved = lt::pickle_load_file(checkpoint->best_model_path()).toGenericDict();
  EXPECT_EQ(saved.at("hyper_parameters").toGenericDict().size(), 2u);
  EXPECT_EQ(saved.at("datamodule_hyper_parameters").toGenericDict().at("root").toStringRef(), "/data");
  lt::Trainer clash(options(1).logger(std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(dir_.string()))));
  try {
    clash.fit(module(), std::make_shared<Data>(lt::HParams{{"batch_size", 8}}));
    FAIL() << "a clash was accepted";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("batch_size (module 2, data module 8)"), std::string::npos) << e.what();
  }
}

}  // namespace
