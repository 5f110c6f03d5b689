// The loops on streams (data/iterable_dataset.h through the Trainer): a
// stream trains, validates, tests and predicts like the map-style loader of
// the same rows (of unknown and known length, with loader workers, resumed
// mid-epoch), and what a stream of unknown length cannot do is refused.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/row_stream.h"
#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

// -- streams (IterableDataset) -----------------------------------------------------

std::vector<torch::Tensor> weights(torch::nn::Module& m) {
  std::vector<torch::Tensor> out;
  for (const auto& p : m.parameters()) out.push_back(p.detach().clone());
  return out;
}

// A stream trains as the same rows through a map-style loader: 18 rows in
// batches of 4 (the last of 2, alone in its accumulation window: the stream
// is read one batch ahead to know it is the last), accumulating 2, over 2
// epochs; of unknown length and of known length; and resumed from a
// mid-epoch checkpoint.
TEST_F(TrainerTest, AStreamTrainsLikeTheMapStyleLoader) {
  const auto rows = regression_data(18);
  const std::string dir =
      (std::filesystem::temp_directory_path() / ("lt_stream_" + std::to_string(::getpid()))).string();
  auto run = [&](std::shared_ptr<lt::DataLoader> loader, std::vector<std::shared_ptr<lt::Callback>> callbacks,
                 const std::string& ckpt_path) {
    torch::manual_seed(0);
    auto model = std::make_shared<Regressor>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).accumulate_grad_batches(2).enable_progress_bar(false)
                            .default_root_dir(dir).callbacks(callbacks));
    trainer.fit(model, loader, nullptr, ckpt_path);
    EXPECT_EQ(trainer.global_step(), 6);
    return weights(*model);
  };
  auto stream = [&](bool known) {
    auto rows_stream = std::make_shared<lt::testing::RowStream>(rows->data(), rows->targets(), known);
    return std::make_shared<lt::DataLoader>(rows_stream, lt::DataLoaderOptions(4));
  };
  const auto expected = run(std::make_shared<lt::DataLoader>(rows, lt::DataLoaderOptions(4)), {}, "");
  auto every = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath(dir).every_n_train_steps(1).save_top_k(-1));
  for (bool known : {false, true}) {
    const auto got = run(stream(known), {every}, "");
    for (size_t i = 0; i < got.size(); ++i) EXPECT_TRUE(got[i].equal(expected[i])) << "known " << known << " " << i;
  }
  // Step 2 is mid-epoch 0 (4 of its 5 batches done): the resumed stream skips 16 rows.
  const std::string mid = dir + "/epoch=0-step=2.ckpt";
  ASSERT_EQ(lt::pickle_load_file(mid).toGenericDict().at("epoch_iteration").toInt(), 4);
  const auto resumed = run(stream(false), {}, mid);
  for (size_t i = 0; i < resumed.size(); ++i) EXPECT_TRUE(resumed[i].equal(expected[i])) << "resumed " << i;
  std::filesystem::remove_all(dir);
}

TEST_F(TrainerTest, WhatAStreamOfUnknownLengthCannotDoIsRefused) {
  const auto rows = regression_data(22);
  auto stream = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::testing::RowStream>(rows->data(), rows->targets()), lt::DataLoaderOptions(4));
  auto error = [&](lt::TrainerOptions options, std::shared_ptr<lt::DataLoader> val) {
    lt::Trainer trainer(options.max_epochs(1).enable_progress_bar(false));
    try {
      trainer.fit(std::make_shared<Regressor>(), stream, val);
    } catch (const lt::ValueError& e) {
      return std::string(e.what());
    }
    return std::string("<trained>");
  };
  EXPECT_NE(error(lt::TrainerOptions().limit_train_batches(0.5), nullptr).find(
                "limit_train_batches: 0.5 is a fraction of the epoch, and this data is a stream of unknown length"),
            std::string::npos);
  EXPECT_NE(error(lt::TrainerOptions().val_check_interval(0.5), std::make_shared<lt::DataLoader>(rows, 4))
                .find("val_check_interval: validation within the epoch needs the epoch's length"),
            std::string::npos);
  EXPECT_NE(error(lt::TrainerOptions().limit_val_batches(0.25), stream)
                .find("limit_val_batches: 0.25 is a fraction of the epoch, and this data is a stream"),
            std::string::npos);
  // A count limit stops the stream there.
  lt::Trainer limited(lt::TrainerOptions().max_epochs(1).limit_train_batches(3).enable_progress_bar(false));
  limited.fit(std::make_shared<Regressor>(), stream);
  EXPECT_EQ(limited.global_step(), 3);
}

// Validation, test and predict read a stream as a map-style loader of the
// same rows: the same metrics and predictions, without and with loader
// workers (each reading every other batch), of unknown and known length;
// a count limit stops the stream there.
TEST_F(TrainerTest, StreamsValidateTestAndPredictLikeTheMapStyleLoader) {
  class Evaluated : public Regressor {
   public:
    void test_step(const Batch& batch, int64_t) override {
      log("test_loss", torch::mse_loss(forward(batch.data), batch.target));
    }
    torch::Tensor predict_step(const Batch& batch, int64_t) override { return forward(batch.data); }
  };
  const auto rows = regression_data(18);  // 5 batches of 4, the last of 2
  auto stream = [&](bool known, int64_t workers) {
    return std::make_shared<lt::DataLoader>(
        std::make_shared<lt::testing::RowStream>(rows->data(), rows->targets(), known, /*block=*/4),
        lt::DataLoaderOptions(4).num_workers(workers));
  };
  torch::manual_seed(0);
  auto model = std::make_shared<Evaluated>();
  lt::Trainer trainer(lt::TrainerOptions().enable_progress_bar(false));
  const auto val = trainer.validate(model, loader(rows, 4));
  const auto test = trainer.test(model, loader(rows, 4));
  const auto predicted = torch::cat(trainer.predict(model, loader(rows, 4)));
  ASSERT_EQ(predicted.size(0), 18);
  for (bool known : {false, true}) {
    for (int64_t workers : {0, 2}) {
      const std::string where = c10::str("known ", known, ", workers ", workers);
      EXPECT_DOUBLE_EQ(trainer.validate(model, stream(known, workers)).at("val_loss"), val.at("val_loss")) << where;
      EXPECT_DOUBLE_EQ(trainer.test(model, stream(known, workers)).at("test_loss"), test.at("test_loss")) << where;
      EXPECT_TRUE(torch::equal(torch::cat(trainer.predict(model, stream(known, workers))), predicted)) << where;
    }
  }
  // In fit, the sanity check and each epoch's validation run over the stream to its end, or its count limit.
  auto validations = [&](lt::TrainerOptions options) {
    auto fresh = std::make_shared<Evaluated>();
    lt::Trainer fitting(options.max_epochs(2).enable_progress_bar(false));
    fitting.fit(fresh, loader(rows, 4), stream(false, 2));
    return fresh->validation_steps;
  };
  EXPECT_EQ(validations(lt::TrainerOptions().num_sanity_val_steps(-1)), 5 + 2 * 5);
  EXPECT_EQ(validations(lt::TrainerOptions().num_sanity_val_steps(2).limit_val_batches(3)), 2 + 2 * 3);
}

}  // namespace
