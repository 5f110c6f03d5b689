// callbacks/early_stopping.h: patience, min_delta, mode, thresholds and
// non-finite values, a missing metric, and its state round trip, as
// Lightning's EarlyStopping (the oracle: its documented behavior on a
// scripted val_loss).
#include <filesystem>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <limits>

#include <lightning_cpp/callbacks/early_stopping.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace fs = std::filesystem;

namespace {

// -- EarlyStopping ------------------------------------------------------------------------------

TEST_F(CallbacksTest, EarlyStoppingStopsAfterPatienceChecksWithoutImprovement) {
  // Best at epoch 1 (0.5); epochs 2, 3 do not improve; patience 2 stops after epoch 3.
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, 0.5, 0.6, 0.55, 0.1, 0.1});
  auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").patience(2));
  lt::Trainer trainer(options(10).callbacks({es}));
  trainer.fit(module, loader(), loader());
  EXPECT_EQ(es->stopped_epoch(), 3);
  EXPECT_EQ(trainer.current_epoch(), 4);  // epochs 0..3 ran
  EXPECT_EQ(es->wait_count(), 2);
  EXPECT_DOUBLE_EQ(es->best_score(), 0.5);
  EXPECT_NE(es->stopping_reason().find("did not improve in the last 2 records"), std::string::npos);
}

TEST_F(CallbacksTest, EarlyStoppingMinDeltaAndModeMax) {
  // Max mode: +0.05 is not an improvement with min_delta 0.1.
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{0.5, 0.55, 0.58, 0.9});
  auto es = std::make_shared<lt::EarlyStopping>(
      lt::EarlyStoppingOptions("val_loss").mode("max").min_delta(0.1).patience(2));
  lt::Trainer trainer(options(10).callbacks({es}));
  trainer.fit(module, loader(), loader());
  EXPECT_EQ(es->stopped_epoch(), 2);
  EXPECT_DOUBLE_EQ(es->best_score(), 0.5);
}

TEST_F(CallbacksTest, EarlyStoppingThresholdAndNonFinite) {
  {
    auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, 0.2, 0.01});
    auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").stopping_threshold(0.3));
    lt::Trainer trainer(options(10).callbacks({es}));
    trainer.fit(module, loader(), loader());
    EXPECT_EQ(es->stopped_epoch(), 1);
    EXPECT_NE(es->stopping_reason().find("stopping threshold reached"), std::string::npos);
  }
  {
    auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, NAN, 0.5});
    auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").patience(100));
    lt::Trainer trainer(options(10).callbacks({es}));
    trainer.fit(module, loader(), loader());
    EXPECT_EQ(es->stopped_epoch(), 1);
    EXPECT_NE(es->stopping_reason().find("is not finite"), std::string::npos);
  }
}

TEST_F(CallbacksTest, EarlyStoppingMissingMetricIsAnError) {
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0});
  auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_acc"));
  lt::Trainer trainer(options(2).callbacks({es}));
  try {
    trainer.fit(module, loader(), loader());
    FAIL();
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()),
              "EarlyStopping: monitored metric 'val_acc' was not logged; available metrics: train_loss, val_loss. "
              "Log it with self.log, or pass strict=false");
  }
}

TEST_F(CallbacksTest, EarlyStoppingStateRoundTrips) {
  lt::EarlyStopping a(lt::EarlyStoppingOptions("val_loss").patience(5));
  auto module = std::make_shared<ScriptedModule>(std::vector<double>{1.0, 2.0, 3.0});
  auto es = std::make_shared<lt::EarlyStopping>(lt::EarlyStoppingOptions("val_loss").patience(5));
  lt::Trainer trainer(options(3).callbacks({es}));
  trainer.fit(module, loader(), loader());
  a.load_state_dict(es->state_dict());
  EXPECT_EQ(a.wait_count(), 2);
  EXPECT_DOUBLE_EQ(a.best_score(), 1.0);
  EXPECT_EQ(es->state_key(), "EarlyStopping{'monitor': 'val_loss', 'mode': 'min'}");
}

}  // namespace
