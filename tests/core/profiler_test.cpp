// core/profiler.h through the Trainer: "simple" counts and times every loop
// phase and hook; "pytorch" writes LibTorch's Chrome trace with our named
// actions inside.
#include <gtest/gtest.h>

#include <filesystem>
#include <memory>
#include <string>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/profiler.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/trainer/trainer.h>

#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

// Lightning's profiler: "simple" counts and times every loop phase and hook.
TEST_F(TrainerTest, SimpleProfilerTimesEveryPhaseAndHook) {
  auto profiler = std::make_shared<lt::SimpleProfiler>();
  auto hook = std::make_shared<lt::LambdaCallback>("Probe");
  hook->on_train_batch_end_fn = [](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const Batch&, int64_t) {};
  std::vector<std::string> printed;
  auto previous = lt::set_info_handler([&](const std::string& m) { printed.push_back(m); });
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).profiler(profiler).callbacks({hook})
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(std::make_shared<Regressor>(), loader(regression_data(20), 4), loader(regression_data(8, 9), 4));
  lt::set_info_handler(previous);
  const auto& stats = profiler->stats();
  const auto calls = [&](const std::string& action) {
    auto it = stats.find(action);
    return it == stats.end() ? int64_t{-1} : it->second.calls;
  };
  EXPECT_EQ(calls("run_training_epoch"), 2);
  EXPECT_EQ(calls("[_TrainingEpochLoop].train_dataloader_next"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.training_step"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.backward"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.optimizer_step"), 10);
  EXPECT_EQ(calls("[Strategy]single_device.validation_step"), 2 + 2 * 2) << "sanity check and two validations";
  EXPECT_EQ(calls("[Callback]Probe.on_train_batch_end"), 10);
  EXPECT_EQ(calls("[Callback]Probe.on_fit_start"), 1);
  EXPECT_LE(stats.at("[Strategy]single_device.training_step").total_s, stats.at("run_training_epoch").total_s);
  ASSERT_EQ(printed.size(), 1u);
  EXPECT_EQ(printed[0].rfind("FIT Profiler Report", 0), 0u) << printed[0];
  EXPECT_NE(printed[0].find("|  run_training_epoch"), std::string::npos) << printed[0];
}

// "pytorch" (or "torch"): LibTorch's autograd profiler over the stage, a
// Chrome trace with the operators inside our named actions.
TEST_F(TrainerTest, TorchProfilerWritesAChromeTrace) {
  char tmpl[] = "/tmp/lt_torch_profiler_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  auto profiler = std::make_shared<lt::TorchProfiler>();
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(1).profiler(profiler).default_root_dir(dir)
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(std::make_shared<Regressor>(), loader(regression_data(8), 4));
  ASSERT_EQ(profiler->trace_file(), dir + "/lightning_logs/version_0/train-trace-rank0.json") << "in the log_dir";
  const std::string script = "import json,sys; e=json.load(open(sys.argv[1])); e=e['traceEvents'] if "
                             "isinstance(e, dict) else e; n={x.get('name') for x in e}; "
                             "sys.exit(0 if {'aten::addmm','[Strategy]single_device.training_step'} <= n else 1)";
  EXPECT_EQ(std::system(("/usr/bin/python3 -c \"" + script + "\" " + profiler->trace_file()).c_str()), 0);
  std::filesystem::remove_all(dir);
}

}  // namespace
