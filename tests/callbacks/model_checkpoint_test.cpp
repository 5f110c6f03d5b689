// callbacks/model_checkpoint.h: top-k bookkeeping by the monitored metric,
// modes, every_n_train_steps, file names and never overwriting a file, as
// Lightning's ModelCheckpoint (the oracle: the files it keeps for a scripted
// val_loss).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

// -- ModelCheckpoint ------------------------------------------------------------------------------

TEST_F(CallbacksTest, ModelCheckpointKeepsTopKByMonitor) {
  // val_loss per epoch: 5, 3, 4, 1, 2  ->  top-2 (min): epochs 3 (1.0) and 4 (2.0).
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{5, 3, 4, 1, 2});
  const fs::path ckpt_dir = dir_ / "ckpts";
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                      .dirpath(ckpt_dir.string())
                                                      .monitor("val_loss")
                                                      .save_top_k(2)
                                                      .save_last(true)
                                                      .filename("{epoch}-{val_loss:.1f}"));
  lt::Trainer trainer(options(5).callbacks({mc}));
  trainer.fit(module, loader(), loader());
  EXPECT_EQ(files(ckpt_dir),
            (std::vector<std::string>{"epoch=3-val_loss=1.0.ckpt", "epoch=4-val_loss=2.0.ckpt", "last.ckpt"}));
  const std::string best = (ckpt_dir / "epoch=3-val_loss=1.0.ckpt").string();
  const std::string kth = (ckpt_dir / "epoch=4-val_loss=2.0.ckpt").string();
  EXPECT_EQ(mc->best_model_path(), best);
  EXPECT_DOUBLE_EQ(*mc->best_model_score(), 1.0);
  EXPECT_EQ(mc->kth_best_model_path(), kth);
  EXPECT_EQ(mc->best_k_models(), (std::map<std::string, double>{{best, 1.0}, {kth, 2.0}}));
  EXPECT_EQ(mc->last_model_path(), (ckpt_dir / "last.ckpt").string());

  // The saved bookkeeping restores into a callback writing to the same folder.
  auto ckpt = lt::pickle_load_file(best).toGenericDict();
  auto states = ckpt.at("callbacks").toGenericDict();
  ASSERT_TRUE(states.contains(mc->state_key()));
  lt::ModelCheckpoint restored(lt::ModelCheckpointOptions().dirpath(ckpt_dir.string()).monitor("val_loss").save_top_k(2));
  restored.load_state_dict(states.at(mc->state_key()).toGenericDict());
  EXPECT_EQ(restored.best_model_path(), best);
  EXPECT_EQ(ckpt.at("epoch").toInt(), 3);  // Lightning's: written during epoch 3, at its end
  EXPECT_TRUE(ckpt.at("epoch_finished").toBool());
}

TEST_F(CallbacksTest, ModelCheckpointModeMaxAllAndNone) {
  const std::vector<double> values{1, 3, 2};
  {
    const fs::path d = dir_ / "max";
    auto mc = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(d.string()).monitor("val_loss").mode("max").save_top_k(1));
    lt::Trainer trainer(options(3).callbacks({mc}));
    trainer.fit(std::make_shared<ScriptedModule>(values), loader(), loader());
    EXPECT_EQ(files(d), std::vector<std::string>{"epoch=1-step=8.ckpt"});
  }
  {
    const fs::path d = dir_ / "all";
    auto mc = std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(d.string()).monitor("val_loss").save_top_k(-1));
    lt::Trainer trainer(options(3).callbacks({mc}));
    trainer.fit(std::make_shared<ScriptedModule>(values), loader(), loader());
    EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=0-step=4.ckpt", "epoch=1-step=8.ckpt", "epoch=2-step=12.ckpt"}));
  }
  {
    const fs::path d = dir_ / "none";
    auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(d.string()).save_top_k(0));
    lt::Trainer trainer(options(2).callbacks({mc}));
    trainer.fit(std::make_shared<ScriptedModule>(values), loader(), loader());
    EXPECT_EQ(files(d), std::vector<std::string>{});
  }
}

TEST_F(CallbacksTest, ModelCheckpointWithoutMonitorKeepsTheLatest) {
  auto mc = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer trainer(options(3).callbacks({mc}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  // Default folder, as Lightning's: the default logger's <default_root_dir>/lightning_logs/version_0/checkpoints.
  const fs::path folder = dir_ / "lightning_logs" / "version_0" / "checkpoints";
  EXPECT_EQ(files(folder), std::vector<std::string>{"epoch=2-step=12.ckpt"});
  EXPECT_EQ(mc->best_model_path(), (folder / "epoch=2-step=12.ckpt").string());
  // Without a logger (Lightning's logger=False): <default_root_dir>/checkpoints.
  auto alone = std::make_shared<lt::ModelCheckpoint>();
  lt::Trainer unlogged(options(3).callbacks({alone}).default_logger(false));
  unlogged.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(alone->best_model_path(), (dir_ / "checkpoints" / "epoch=2-step=12.ckpt").string());
}

TEST_F(CallbacksTest, ModelCheckpointEveryNTrainSteps) {
  const fs::path d = dir_ / "steps";
  auto mc = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath(d.string()).every_n_train_steps(3).save_top_k(-1));
  lt::Trainer trainer(options(2).callbacks({mc}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  // 4 steps per epoch: steps 3 and 6; no epoch-end saves (every_n_epochs defaults to 0 then).
  EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=0-step=3.ckpt", "epoch=1-step=6.ckpt"}));
}

// A monitored key logged in validation does not exist before the first
// validation: as Lightning, the top-k save is skipped then, with one warning
// (4 steps an epoch, saves every 2: steps 2 and 4 come before epoch 0's
// validation). After a validation, a key still missing is an error.
TEST_F(CallbacksTest, ModelCheckpointSkipsAMonitorNotLoggedBeforeTheFirstValidation) {
  const fs::path d = dir_ / "steps";
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                      .dirpath(d.string())
                                                      .monitor("val_loss")
                                                      .every_n_train_steps(2)
                                                      .save_top_k(-1));
  lt::Trainer trainer(options(2).callbacks({mc}));
  testing::internal::CaptureStderr();
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{5, 3}), loader(), loader());
  const std::string err = testing::internal::GetCapturedStderr();
  EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=1-step=6.ckpt", "epoch=1-step=8.ckpt"}));
  size_t warnings = 0;
  for (size_t at = err.find("could not find the monitored key"); at != std::string::npos;
       at = err.find("could not find the monitored key", at + 1)) {
    ++warnings;
  }
  EXPECT_EQ(warnings, 1u) << err;
  auto never = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "never").string()).monitor("nope").every_n_train_steps(2));
  lt::Trainer failing(options(2).callbacks({never}));
  try {
    failing.fit(std::make_shared<ScriptedModule>(std::vector<double>{5, 3}), loader(), loader());
    FAIL() << "a monitored key missing after a validation";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("ModelCheckpoint(monitor='nope') could not find the monitored key"),
              std::string::npos) << e.what();
    EXPECT_EQ(failing.global_step(), 6) << "the first save after epoch 0's validation";
  }
}

TEST_F(CallbacksTest, ModelCheckpointFileNames) {
  const std::map<std::string, double> m{{"epoch", 3}, {"step", 120}, {"val_loss", 0.4242}, {"val/acc", 0.5}};
  lt::ModelCheckpoint a(lt::ModelCheckpointOptions().filename("{epoch:02d}-{val_loss:.2f}"));
  EXPECT_EQ(a.format_checkpoint_name(m), "epoch=03-val_loss=0.42.ckpt");
  EXPECT_EQ(a.format_checkpoint_name(m, {}, 2), "epoch=03-val_loss=0.42-v2.ckpt");
  lt::ModelCheckpoint b(lt::ModelCheckpointOptions().filename("model-{epoch}-{val_loss}").auto_insert_metric_name(false));
  EXPECT_EQ(b.format_checkpoint_name(m), "model-3-0.4242.ckpt");
  lt::ModelCheckpoint c;
  EXPECT_EQ(c.format_checkpoint_name(m), "epoch=3-step=120.ckpt");
  EXPECT_EQ(c.format_checkpoint_name(m, "{missing:.3f}"), "missing=0.000.ckpt");
}

TEST_F(CallbacksTest, ModelCheckpointDoesNotOverwriteAnExistingFile) {
  const fs::path d = dir_ / "v";
  fs::create_directories(d);
  std::ofstream(d / "epoch=0-step=4.ckpt") << "someone else's";
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(d.string()).save_top_k(-1));
  lt::Trainer trainer(options(1).callbacks({mc}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(files(d), (std::vector<std::string>{"epoch=0-step=4-v1.ckpt", "epoch=0-step=4.ckpt"}));
}

}  // namespace
