// The Trainer's checkpoints: a fit resumed from a checkpoint (after an
// epoch, mid-epoch, with ckpt_path "last" after a crash) ends with the same
// weights as an uninterrupted one, bitwise, and goes on in its logger's
// folder; the checkpoint's epoch is Lightning's; ckpt_path "best" and
// "last" in every stage. The oracle is the uninterrupted run.
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/checkpoint_fixture.h"
#include "support/multiprocess.h"

using lt::testing::read_file;
using namespace lt::testing;  // kPython, Reference, data, expect_same_weights (support/checkpoint_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(CheckpointTest, ResumeAfterEpochKEqualsUninterruptedRun) {
  constexpr int64_t kEpochs = 5, kStopAfter = 2;
  // Uninterrupted.
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  lt::Trainer a(options(kEpochs));
  a.fit(straight, data(true), data(false));

  // Stopped after epoch kStopAfter, with last.ckpt written at that epoch's end.
  torch::manual_seed(0);
  auto first = std::make_shared<Reference>();
  auto mc = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()).save_last(true).save_top_k(0));
  lt::Trainer b(options(kStopAfter).callbacks({mc}));
  b.fit(first, data(true), data(false));
  const std::string last = (dir_ / "ckpt" / "last.ckpt").string();
  auto ckpt = lt::pickle_load_file(last).toGenericDict();
  EXPECT_EQ(ckpt.at("epoch").toInt(), kStopAfter - 1);  // saved at the end of epoch kStopAfter - 1
  EXPECT_TRUE(ckpt.at("epoch_finished").toBool());
  EXPECT_EQ(ckpt.at("global_step").toInt(), kStopAfter * 6);

  // Resumed in a fresh model and trainer (different initial weights).
  torch::manual_seed(999);
  auto resumed = std::make_shared<Reference>();
  lt::Trainer c(options(kEpochs));
  c.fit(resumed, data(true), data(false), last);
  EXPECT_EQ(c.current_epoch(), kEpochs);
  EXPECT_EQ(c.global_step(), a.global_step());
  expect_same_weights(*straight, *resumed);
}

// A checkpoint taken mid-epoch (after an optimizer step) holds where the
// epoch was: resumed, the run ends with the uninterrupted run's weights,
// bitwise (dropout's generator, Adam, the scheduler and the loader's order
// included).
TEST_F(CheckpointTest, ResumeMidEpochEqualsUninterruptedRun) {
  constexpr int64_t kEpochs = 3;  // 6 batches per epoch, accumulate 2: 3 steps per epoch
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  auto every = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()).every_n_train_steps(2).save_top_k(-1));
  lt::Trainer a(options(kEpochs).accumulate_grad_batches(2).callbacks({every}));
  a.fit(straight, data(true), data(false));
  ASSERT_EQ(a.global_step(), 9);
  for (const char* name : {"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=8.ckpt"}) {
    const std::string path = (dir_ / "ckpt" / name).string();
    ASSERT_TRUE(fs::exists(path)) << path;
    auto ckpt = lt::pickle_load_file(path).toGenericDict();
    ASSERT_TRUE(ckpt.contains("epoch_iteration")) << name;
    EXPECT_EQ(ckpt.at("epoch_iteration").toInt(), ckpt.at("global_step").toInt() % 3 * 2) << name;
    torch::manual_seed(999);
    auto resumed = std::make_shared<Reference>();
    lt::Trainer c(options(kEpochs).accumulate_grad_batches(2));
    c.fit(resumed, data(true), data(false), path);
    EXPECT_EQ(c.global_step(), a.global_step()) << name;
    expect_same_weights(*straight, *resumed);
  }
  // ckpt_path "last": the newest checkpoint in the ModelCheckpoint's folder (step 9's); "best" with none: an error.
  auto in_folder = [&] {
    return std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()));
  };
  auto resumed = std::make_shared<Reference>();
  lt::Trainer d(options(kEpochs).accumulate_grad_batches(2).callbacks({in_folder()}));
  d.fit(resumed, data(true), data(false), "last");
  EXPECT_EQ(d.global_step(), 9);
  expect_same_weights(*straight, *resumed);
  lt::Trainer e(options(kEpochs).callbacks({std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "empty").string()))}));
  try {
    e.fit(std::make_shared<Reference>(), data(true), data(false), "best");
    FAIL() << "ckpt_path best without a checkpoint was accepted";
  } catch (const lt::ValueError& error) {
    EXPECT_NE(std::string(error.what()).find("ckpt_path: best: no best checkpoint was found"), std::string::npos)
        << error.what();
  }
}

// A run that dies after a checkpoint and is resumed with ckpt_path "last"
// goes on in its logger's version folder: metrics.csv ends as the
// uninterrupted run's, byte for byte (rows logged after the checkpoint are
// not there twice). validate/test in a new process find the last and the
// best checkpoint there, and log beside the training run.
TEST_F(CheckpointTest, ResumedRunContinuesItsLoggerFolderAndMetrics) {
  constexpr int64_t kEpochs = 4;  // 6 steps per epoch
  struct CrashAt : lt::Callback {
    explicit CrashAt(int64_t step) : step(step) {}
    std::string name() const override { return "crash"; }
    void on_train_batch_end(lt::Trainer& t, lt::LightningModule&, const torch::Tensor&, const lt::Batch&,
                            int64_t) override {
      if (t.global_step() == step) throw std::runtime_error("crash");
    }
    int64_t step;
  };
  auto trainer_options = [&](const fs::path& save_dir, std::vector<std::shared_ptr<lt::Callback>> extra) {
    auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(save_dir.string()).flush_logs_every_n_steps(1));
    // The "best" model is the worst one (mode max), so that it is not the last.
    extra.push_back(std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().monitor("val_loss").mode("max").save_last(true)));
    return options(kEpochs).log_every_n_steps(1).logger(logger).callbacks(extra);
  };
  const fs::path straight_dir = dir_ / "straight", run_dir = dir_ / "run";
  const fs::path version0 = run_dir / "lightning_logs" / "version_0";
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  lt::Trainer a(trainer_options(straight_dir, {}));
  a.fit(straight, data(true), data(false));

  torch::manual_seed(0);
  lt::Trainer b(trainer_options(run_dir, {std::make_shared<CrashAt>(15)}));
  EXPECT_THROW(b.fit(std::make_shared<Reference>(), data(true), data(false)), std::runtime_error);
  const std::string metrics = read_file(version0 / "metrics.csv");
  ASSERT_NE(metrics.find("\n2,14,"), std::string::npos) << "the crashed run's rows after its checkpoint:\n" << metrics;

  auto resumed = std::make_shared<Reference>();
  lt::Trainer c(trainer_options(run_dir, {}));
  c.fit(resumed, data(true), data(false), "last");
  expect_same_weights(*straight, *resumed);
  EXPECT_FALSE(fs::exists(run_dir / "lightning_logs" / "version_1")) << "the resumed run started a new version";
  EXPECT_EQ(read_file(version0 / "metrics.csv"),
            read_file(straight_dir / "lightning_logs" / "version_0" / "metrics.csv"));

  // validate in a new process: "best" is the best model the newest
  // checkpoint names (as the uninterrupted run does); "last" the newest file.
  auto best_name = [](lt::Trainer& t) {
    return fs::path(dynamic_cast<lt::ModelCheckpoint&>(*t.callbacks().back()).best_model_path()).filename().string();
  };
  EXPECT_EQ(best_name(c), best_name(a));
  ASSERT_NE(best_name(a), "last.ckpt");
  std::map<std::string, double> val_loss;
  for (const auto& [which, file] : {std::pair<std::string, std::string>{"best", best_name(a)}, {"last", "last.ckpt"}}) {
    lt::Trainer v(trainer_options(run_dir, {}));
    val_loss[which] = v.validate(std::make_shared<Reference>(), data(false), which).at("val_loss");
    auto model = std::make_shared<Reference>();
    lt::load_weights(*model, (version0 / "checkpoints" / file).string());
    lt::Trainer w(options(1));
    EXPECT_DOUBLE_EQ(val_loss[which], w.validate(model, data(false)).at("val_loss")) << which;
  }
  EXPECT_NE(val_loss["best"], val_loss["last"]);
  EXPECT_FALSE(fs::exists(run_dir / "lightning_logs" / "version_1")) << "validate started a new version";
  const std::string fitted = read_file(straight_dir / "lightning_logs" / "version_0" / "metrics.csv");
  const std::string after = read_file(version0 / "metrics.csv");
  EXPECT_TRUE(after.size() > fitted.size() && after.rfind(fitted, 0) == 0)
      << "validate's rows are not appended to the run's metrics.csv:\n" << after;
}

// The checkpoint's "epoch" is Lightning's: current_epoch when it was saved,
// the same number as the file name's {epoch}, mid-epoch and at the epoch's
// end alike; "epoch_finished" tells them apart. Both resume exactly, and so
// do checkpoints written before that key (whose "epoch" was the next epoch to
// run after an epoch's end).
TEST_F(CheckpointTest, CheckpointEpochIsLightningsCurrentEpoch) {
  constexpr int64_t kEpochs = 3;  // 6 steps per epoch
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  auto every = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                         .dirpath((dir_ / "ckpt").string())
                                                         .every_n_train_steps(5)
                                                         .every_n_epochs(1)
                                                         .save_top_k(-1));
  lt::Trainer a(options(kEpochs).callbacks({every}));
  a.fit(straight, data(true), data(false));
  ASSERT_EQ(a.global_step(), 18);
  // {file, epoch, finished}: steps 5, 10 and 15 mid-epoch, 6, 12 and 18 at epoch ends.
  const std::vector<std::tuple<std::string, int64_t, bool>> expected = {
      {"epoch=0-step=5.ckpt", 0, false},  {"epoch=0-step=6.ckpt", 0, true},  {"epoch=1-step=10.ckpt", 1, false},
      {"epoch=1-step=12.ckpt", 1, true}, {"epoch=2-step=15.ckpt", 2, false}, {"epoch=2-step=18.ckpt", 2, true}};
  for (const auto& [name, epoch, finished] : expected) {
    const fs::path path = dir_ / "ckpt" / name;
    ASSERT_TRUE(fs::exists(path)) << path;
    auto ckpt = lt::pickle_load_file(path.string()).toGenericDict();
    EXPECT_EQ(ckpt.at("epoch").toInt(), epoch) << name;
    ASSERT_TRUE(ckpt.contains("epoch_finished")) << name;
    EXPECT_EQ(ckpt.at("epoch_finished").toBool(), finished) << name;
    EXPECT_EQ(ckpt.contains("epoch_iteration"), !finished) << name;
  }
  auto resume = [&](const std::string& path) {
    torch::manual_seed(999);
    auto resumed = std::make_shared<Reference>();
    lt::Trainer c(options(kEpochs));
    c.fit(resumed, data(true), data(false), path);
    EXPECT_EQ(c.global_step(), a.global_step()) << path;
    EXPECT_EQ(c.current_epoch(), kEpochs) << path;
    expect_same_weights(*straight, *resumed);
  };
  for (const char* name : {"epoch=0-step=6.ckpt", "epoch=1-step=10.ckpt"}) resume((dir_ / "ckpt" / name).string());
  // The same checkpoints as lightning-cpp wrote them before "epoch_finished".
  for (const char* name : {"epoch=0-step=6.ckpt", "epoch=1-step=10.ckpt"}) {
    auto ckpt = lt::pickle_load_file((dir_ / "ckpt" / name).string()).toGenericDict();
    if (ckpt.at("epoch_finished").toBool()) ckpt.insert_or_assign("epoch", ckpt.at("epoch").toInt() + 1);
    ckpt.erase("epoch_finished");
    const std::string old = (dir_ / (std::string("old-") + name)).string();
    lt::atomic_pickle_save(ckpt, old);
    resume(old);
  }
}

// ckpt_path "best" and "last" for fit, validate, test and predict, in the
// Trainer that fitted (best: its ModelCheckpoint's best_model_path) and in a
// new one (best: the best model the newest checkpoint names; last: the newest
// checkpoint in the folder). Each stage runs with that file's weights; with
// no checkpoint, each names what is missing.
TEST_F(CheckpointTest, CkptPathBestAndLastInEveryStage) {
  const fs::path folder = dir_ / "ckpt";
  auto checkpoint = [](const fs::path& dirpath) {
    // The best model is the worst one (mode max), so that it is not the last.
    return std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(dirpath.string()).monitor("val_loss").mode("max").save_last(true));
  };
  struct Outcome {
    double val_loss, test_loss;
    torch::Tensor predictions;
  };
  auto run_stages = [&](lt::Trainer& t, const std::string& ckpt_path) {
    // A fresh model each time: its own initial weights never pass for the file's.
    auto model = [] { return std::make_shared<Reference>(); };
    return Outcome{t.validate(model(), data(false), ckpt_path).at("val_loss"),
                   t.test(model(), data(false), ckpt_path).at("test_loss"),
                   torch::cat(t.predict(model(), data(false), ckpt_path))};
  };
  auto with_weights_of = [&](const std::string& file) {
    auto model = std::make_shared<Reference>();
    lt::load_weights(*model, file);
    lt::Trainer t(options(1));
    return Outcome{t.validate(model, data(false)).at("val_loss"), t.test(model, data(false)).at("test_loss"),
                   torch::cat(t.predict(model, data(false)))};
  };
  auto expect_same = [](const Outcome& a, const Outcome& b, const std::string& what) {
    EXPECT_EQ(a.val_loss, b.val_loss) << what;
    EXPECT_EQ(a.test_loss, b.test_loss) << what;
    EXPECT_TRUE(torch::equal(a.predictions, b.predictions)) << what;
  };
  auto error_of = [](const std::function<void()>& stage) -> std::string {
    try {
      stage();
    } catch (const lt::ValueError& e) {
      return e.what();
    }
    return "(no error)";
  };

  // No checkpoint yet, and no ModelCheckpoint: each stage says which is missing.
  for (const char* which : {"best", "last"}) {
    lt::Trainer empty(options(1).callbacks({checkpoint(folder)}));
    lt::Trainer none(options(1));
    const std::string where = "' (the ModelCheckpoint's dirpath: ";
    const std::map<std::string, std::function<void(lt::Trainer&)>> stages = {
        {"fit", [&](lt::Trainer& t) { t.fit(std::make_shared<Reference>(), data(true), data(false), which); }},
        {"validate", [&](lt::Trainer& t) { t.validate(std::make_shared<Reference>(), data(false), which); }},
        {"test", [&](lt::Trainer& t) { t.test(std::make_shared<Reference>(), data(false), which); }},
        {"predict", [&](lt::Trainer& t) { t.predict(std::make_shared<Reference>(), data(false), which); }}};
    for (const auto& [fn, stage] : stages) {
      const std::string what = "Trainer." + fn + ": ckpt_path: " + which + ": no " + which + " checkpoint was found";
      const std::string in_folder = error_of([&] { stage(empty); });
      EXPECT_EQ(in_folder.rfind(what + " in '" + folder.string() + where, 0), 0u) << in_folder;
      const std::string no_callback = error_of([&] { stage(none); });
      EXPECT_EQ(no_callback.rfind(what + ": no ModelCheckpoint callback is configured", 0), 0u) << no_callback;
    }
  }

  torch::manual_seed(0);
  auto mc = checkpoint(folder);
  lt::Trainer fitted(options(3).callbacks({mc}));
  fitted.fit(std::make_shared<Reference>(), data(true), data(false));
  const std::string best = mc->best_model_path(), last = (folder / "last.ckpt").string();
  ASSERT_NE(fs::path(best).filename(), "last.ckpt");
  const std::map<std::string, Outcome> expected = {{"best", with_weights_of(best)}, {"last", with_weights_of(last)}};
  ASSERT_NE(expected.at("best").val_loss, expected.at("last").val_loss);
  for (const char* which : {"best", "last"}) {
    expect_same(run_stages(fitted, which), expected.at(which), std::string("the fitting Trainer, ") + which);
    lt::Trainer fresh(options(1).callbacks({checkpoint(folder)}));
    expect_same(run_stages(fresh, which), expected.at(which), std::string("a new Trainer, ") + which);
  }

  // fit resumes from them: after the best model's epoch, or epoch 2 (last);
  // max_epochs is reached there, so that nothing new is written into the folder.
  struct AtTrainStart : lt::Callback {
    std::string name() const override { return "at_train_start"; }
    void on_train_start(lt::Trainer& t, lt::LightningModule&) override { at = {t.current_epoch(), t.global_step()}; }
    std::pair<int64_t, int64_t> at{-1, -1};
  };
  const int64_t after_best = lt::pickle_load_file(best).toGenericDict().at("epoch").toInt() + 1;
  ASSERT_LT(after_best, 3);
  for (const auto& [which, epochs] : {std::pair<std::string, int64_t>{"best", after_best}, {"last", 3}}) {
    auto start = std::make_shared<AtTrainStart>();
    lt::Trainer resumed(options(epochs).callbacks({checkpoint(folder), start}));
    resumed.fit(std::make_shared<Reference>(), data(true), data(false), which);
    EXPECT_EQ(start->at, std::make_pair(epochs, epochs * 6)) << which;
  }
}

}  // namespace
