// callbacks/lambda_callback.h: a LambdaCallback calls the functions it was
// given, as Lightning's LambdaCallback.
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

TEST_F(CallbacksTest, LambdaCallbackCallsItsFunctions) {
  auto cb = std::make_shared<lt::LambdaCallback>();
  int epochs = 0, batches = 0, saves = 0;
  cb->on_train_epoch_end_fn = [&](lt::Trainer&, lt::LightningModule&) { ++epochs; };
  cb->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const lt::Batch&, int64_t) {
    ++batches;
  };
  cb->on_save_checkpoint_fn = [&](lt::Trainer&, lt::LightningModule&, lt::StateDict& ckpt) {
    ++saves;
    ckpt.insert("extra", int64_t{42});
  };
  cb->on_fit_end_fn = [&](lt::Trainer& t, lt::LightningModule&) { t.save_checkpoint((dir_ / "x.ckpt").string()); };
  cb->on_train_end_fn = [&](lt::Trainer& t, lt::LightningModule&) { t.save_checkpoint((dir_ / "x.ckpt").string()); };
  lt::Trainer trainer(options(2).callbacks({cb}));
  trainer.fit(std::make_shared<ScriptedModule>(std::vector<double>{1}), loader(), loader());
  EXPECT_EQ(epochs, 2);
  EXPECT_EQ(batches, 8);
  EXPECT_EQ(saves, 2);
  EXPECT_EQ(lt::pickle_load_file((dir_ / "x.ckpt").string()).toGenericDict().at("extra").toInt(), 42);
}

}  // namespace
