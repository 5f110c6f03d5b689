// plugins/precision/precision.h on the CPU, one process: bf16-mixed tracks
// float32 (and warns where the CPU multiplies bfloat16 slowly), 64-true and
// 16-mixed's gradient scaler equal the hand-written loop (scaled steps bitwise,
// overflowing steps skipped, the scale grown and resumed from the checkpoint,
// under manual optimization too).
#include <gtest/gtest.h>

#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/cpu.h>
#include <lightning_cpp/core/torch_compat.h>
#include <lightning_cpp/plugins/precision/precision.h>
#include <lightning_cpp/trainer/trainer.h>

#include "trainer/trainer_fixture.h"

using lt::Batch;
using namespace lt::testing;  // the Regressor, its data and the hand-written loop (trainer/trainer_fixture.h)

namespace {

class DtypeProbe : public Regressor {
 public:
  torch::Tensor training_step(const Batch& batch, int64_t i) override {
    train_dtype = fc1(batch.data).scalar_type();
    return Regressor::training_step(batch, i);
  }
  void validation_step(const Batch& batch, int64_t i) override {
    val_dtype = fc1(batch.data).scalar_type();
    Regressor::validation_step(batch, i);
  }
  c10::ScalarType train_dtype = c10::ScalarType::Undefined, val_dtype = c10::ScalarType::Undefined;
};

// Lightning's precision="bf16-mixed" on the CPU: the forward's linear layers
// run in bfloat16 (autocast), parameters and gradients stay float32, and
// training tracks float32 closely (measured here: the largest parameter
// difference after 3 epochs 0.030, asked < 0.05; the validation loss within 2%).
TEST_F(TrainerTest, Bf16MixedTracksFloat32) {
  auto data = regression_data(64);
  auto run = [&](const std::string& precision) {
    torch::manual_seed(5);
    auto model = std::make_shared<DtypeProbe>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).precision(precision).enable_progress_bar(false)
                            .enable_model_summary(false).num_sanity_val_steps(0));
    trainer.fit(model, loader(data, 8), loader(regression_data(32, 9), 8));
    return std::make_pair(model, trainer.callback_metrics().at("val_loss"));
  };
  auto [full, full_loss] = run("32-true");
  auto [mixed, mixed_loss] = run("bf16-mixed");
  EXPECT_EQ(full->train_dtype, torch::kFloat);
  EXPECT_EQ(mixed->train_dtype, torch::kBFloat16);
  EXPECT_EQ(mixed->val_dtype, torch::kBFloat16);
  EXPECT_EQ(mixed->fc1->weight.scalar_type(), torch::kFloat) << "parameters stay float32";
  EXPECT_FALSE(lt::compat::autocast_enabled(c10::kCPU)) << "autocast ends with the forward";
  double largest = 0;
  for (const auto& p : full->named_parameters()) {
    largest = std::max(largest, (p.value() - mixed->named_parameters()[p.key()]).abs().max().item<double>());
  }
  EXPECT_GT(largest, 0.0) << "bfloat16 rounding changes the result";
  EXPECT_LT(largest, 0.05);
  EXPECT_NEAR(mixed_loss, full_loss, 0.02 * full_loss);
  std::printf("bf16-mixed vs 32-true: largest parameter difference %.4f, val_loss %.5f vs %.5f\n", largest,
              mixed_loss, full_loss);
}

// bf16-mixed where the CPU multiplies bfloat16 slower than float32 (no
// avx512_bf16 or amx_bf16: 0.07x the steps/s of 32-true on a Zen 3) warns
// with the measured ratio, the CPU and the fix; where it is faster, nothing.
TEST_F(TrainerTest, Bf16MixedWarnsWhereTheCpuMultipliesBf16Slowly) {
  const lt::CpuInfo zen3{"AMD EPYC 7R13 48-Core Processor", {"avx2", "fma"}};
  const std::string warning = lt::bf16_slow_warning(0.07, zen3);
  for (const char* part : {"AMD EPYC 7R13", "at 0.07x the speed of float32", "it lacks avx512_bf16 or amx_bf16",
                           "Use precision 32-true"}) {
    EXPECT_NE(warning.find(part), std::string::npos) << part << " not in: " << warning;
  }
  EXPECT_EQ(lt::bf16_slow_warning(1.43, zen3), "");
  // This machine: measured, and what its units predict.
  const lt::CpuInfo& cpu = lt::cpu_info();
  const double ratio = lt::bf16_matmul_speed_ratio();
  std::printf("this CPU (%s): bfloat16 matmul at %.2fx float32's\n", cpu.model.c_str(), ratio);
  ASSERT_TRUE(std::isfinite(ratio) && ratio > 0) << ratio;
  if (cpu.has("avx512_bf16") || cpu.has("amx_bf16")) EXPECT_GT(ratio, 0.5) << "native bf16, yet slow";
  if (cpu.known() && !cpu.has("avx512f")) EXPECT_LT(ratio, 0.5) << "no avx512 at all, yet bf16 is fast";
}

// precision="64-true", "bf16-true", "16-true": the module and the inputs in
// that dtype, equal to the hand-written loop in it.
TEST_F(TrainerTest, TruePrecisionsEqualTheHandWrittenLoopInTheirDtype) {
  auto data = regression_data(32);
  for (const auto& [name, dtype] : {std::pair{"64-true", torch::kFloat64}, std::pair{"bf16-true", torch::kBFloat16},
                                    std::pair{"16-true", torch::kHalf}}) {
    SCOPED_TRACE(name);
    torch::manual_seed(5);
    auto model = std::make_shared<Regressor>();
    torch::manual_seed(5);
    Regressor reference;
    reference.to(dtype);
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).precision(name).enable_progress_bar(false)
                            .enable_model_summary(false));
    trainer.fit(model, loader(data, 8));
    hand_written_fit(reference, lt::TensorDataset(data->data().to(dtype), data->targets().to(dtype)), 8, 2, 1, 0.0);
    EXPECT_EQ(model->fc1->weight.scalar_type(), dtype);
    EXPECT_EQ(trainer.strategy().precision().name(), name);
    expect_same_parameters(*model, reference);
  }
  EXPECT_THROW(lt::Trainer(lt::TrainerOptions().precision("fp8")), lt::ValueError);
  try {
    lt::Trainer cuda_only(lt::TrainerOptions().precision("16-mixed"));
    FAIL() << "16-mixed without CUDA";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("16-mixed"), std::string::npos) << e.what();
  }
}

// 16-mixed's gradient scaler, checked on the CPU (lt::MixedPrecision built by
// hand: CUDA autocast leaves CPU tensors in float32, the scaler acts as on a
// GPU). With a power-of-two scale, scaling changes no rounding: every step
// taken equals the unscaled hand-written loop bitwise, with accumulation and
// clipping (which must see the unscaled gradients).
TEST_F(TrainerTest, GradScalerStepsEqualTheUnscaledLoop) {
  for (const auto [accumulate, clip] : {ParityCase{1, 0.0}, ParityCase{3, 0.5}}) {
    auto data = regression_data(22);  // 6 batches of 4
    torch::manual_seed(1);
    auto model = std::make_shared<Regressor>();
    torch::manual_seed(1);
    Regressor reference;
    auto precision = std::make_shared<lt::MixedPrecision>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).accumulate_grad_batches(accumulate).gradient_clip_val(clip)
                            .precision_plugin(precision).enable_progress_bar(false).enable_model_summary(false));
    trainer.fit(model, loader(data, 4));
    hand_written_fit(reference, *data, 4, 3, accumulate, clip);
    expect_same_parameters(*model, reference);
    EXPECT_EQ(precision->scaler().get_scale(), 65536.0);
    EXPECT_EQ(precision->scaler().growth_tracker(), trainer.global_step()) << "every step counts toward growth";
  }
}

// A scale so large that the scaled loss overflows float32: those steps are
// skipped and the scale halves until it fits; every later step is taken. The
// result equals the hand-written loop that drops the first k steps, k =
// log2(initial / final scale), and every window still counts a global step.
TEST_F(TrainerTest, GradScalerSkipsOverflowingStepsAndBacksOff) {
  auto data = regression_data(22);
  torch::manual_seed(1);
  auto model = std::make_shared<Regressor>();
  torch::manual_seed(1);
  Regressor reference;
  const double initial = std::ldexp(1.0, 127);  // float32's largest power of two
  auto precision = std::make_shared<lt::MixedPrecision>(lt::GradScalerOptions().init_scale(initial));
  std::vector<double> scales;  // after each step
  auto probe = std::make_shared<lt::LambdaCallback>("ScaleProbe");
  probe->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const Batch&, int64_t) {
    scales.push_back(precision->scaler().get_scale());
  };
  lt::Trainer trainer(lt::TrainerOptions().max_epochs(3).precision_plugin(precision).callbacks({probe})
                          .enable_progress_bar(false).enable_model_summary(false));
  trainer.fit(model, loader(data, 4));
  ASSERT_EQ(scales.size(), 18u);
  EXPECT_EQ(trainer.global_step(), 18) << "a skipped step is still a global step, as in Lightning";
  std::set<int64_t> skipped;
  double before = initial;
  for (size_t i = 0; i < scales.size(); ++i) {
    if (scales[i] != before) {
      EXPECT_EQ(scales[i], before / 2) << "step " << i << ": backs off by half";
      skipped.insert(static_cast<int64_t>(i));
    }
    before = scales[i];
  }
  EXPECT_GT(skipped.size(), 1u) << "2^127 times the loss overflows float32";
  EXPECT_LT(skipped.size(), 18u);
  hand_written_fit(reference, *data, 4, 3, 1, 0.0, skipped);
  expect_same_parameters(*model, reference);
  std::string listing;
  for (auto i : skipped) listing += " " + std::to_string(i);
  std::printf("GradScaler: steps%s of 18 skipped, scale 2^127 -> %g\n", listing.c_str(), scales.back());
}

// The scale grows by growth_factor after growth_interval clean steps; its state
// is in the checkpoint under Lightning's key ("MixedPrecision", PyTorch's
// state_dict keys), and a resumed run goes on from it.
TEST_F(TrainerTest, GradScalerGrowsAndResumesFromTheCheckpoint) {
  char tmpl[] = "/tmp/lt_grad_scaler_XXXXXX";
  const std::string dir = ::mkdtemp(tmpl);
  const std::string path = dir + "/last.ckpt";
  auto data = regression_data(24);  // 6 steps an epoch
  const auto options = lt::GradScalerOptions().init_scale(4.0).growth_interval(4);
  auto run = [&](int64_t epochs, const std::string& ckpt_path) {
    auto precision = std::make_shared<lt::MixedPrecision>(options);
    auto checkpoint = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir).save_last(true));
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(epochs).precision_plugin(precision).callbacks({checkpoint})
                            .enable_progress_bar(false).enable_model_summary(false));
    trainer.fit(std::make_shared<Regressor>(), loader(data, 4), lt::FitOptions().ckpt_path(ckpt_path));
    return precision->scaler();
  };
  const lt::GradScaler first = run(1, "");
  std::filesystem::copy_file(path, dir + "/epoch0.ckpt");
  const lt::GradScaler uninterrupted = run(3, "");
  EXPECT_EQ(uninterrupted.get_scale(), 4.0 * 16) << "18 clean steps: grown 4 times";
  EXPECT_EQ(uninterrupted.growth_tracker(), 2);
  auto saved = lt::pickle_load_file(dir + "/epoch0.ckpt").toGenericDict();
  ASSERT_TRUE(saved.contains("MixedPrecision"));
  auto state = saved.at("MixedPrecision").toGenericDict();
  EXPECT_EQ(state.at("scale").toDouble(), first.get_scale());
  EXPECT_EQ(state.at("_growth_tracker").toInt(), 2);
  EXPECT_EQ(state.at("growth_interval").toInt(), 4);
  const lt::GradScaler resumed = run(3, dir + "/epoch0.ckpt");
  EXPECT_EQ(resumed.get_scale(), uninterrupted.get_scale());
  EXPECT_EQ(resumed.growth_tracker(), uninterrupted.growth_tracker());
  EXPECT_THROW(lt::GradScaler(lt::GradScalerOptions().backoff_factor(1.5)), lt::ValueError);
  std::filesystem::remove_all(dir);
}

// Manual optimization: manual_backward scales, optimizer_step unscales (and
// would skip), as in the automatic loop: equal to the 32-true run bitwise.
TEST_F(TrainerTest, GradScalerUnderManualOptimizationEqualsFloat32) {
  auto data = regression_data(16);
  auto run = [&](std::shared_ptr<lt::Precision> precision) {
    torch::manual_seed(2);
    auto model = std::make_shared<ManualRegressor>();
    lt::Trainer trainer(lt::TrainerOptions().max_epochs(2).precision_plugin(precision).enable_progress_bar(false)
                            .enable_model_summary(false));
    trainer.fit(model, loader(data, 4));
    return model;
  };
  auto scaled = std::make_shared<lt::MixedPrecision>(lt::GradScalerOptions().init_scale(1024).growth_interval(2));
  auto a = run(scaled);
  auto b = run(nullptr);
  expect_same_parameters(*a, *b);
  EXPECT_EQ(scaled->scaler().get_scale(), 1024.0 * 16) << "8 steps, growth every 2";
}

}  // namespace
