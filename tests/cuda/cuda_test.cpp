// On a GPU, one process: the Trainer on CUDA (module, batches, pinned
// copies, checkpoints), the precisions there, ddp and fsdp on NCCL with one
// rank, each against the same run on the CPU or on one device, and the
// monitors' GPU statistics. The
// multi-process Cuda tests (two ranks sharing the GPU over Gloo) live beside
// their CPU workers (join_matrix_test, fsdp_join_test, fsdp_precision_test).
// Every test skips without a GPU; scripts/gpu_check.sh runs them on one.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include <caffe2/serialize/inline_container.h>

#include <lightning_cpp/lightning.h>
#include <lightning_cpp/plugins/precision/precision.h>

#include "distributed/join_oracle.h"
#include "support/cuda.h"
#include "support/multiprocess.h"
#include "trainer/trainer_fixture.h"

using lt::testing::loader;
using lt::testing::regression_data;
using lt::testing::Regressor;

namespace {

// Regressor, noting where its training step ran: the batch's device, the
// parameters' device, the output's dtype.
class ProbedRegressor : public Regressor {
 public:
  torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
    batch_device = batch.data.device();
    parameter_device = fc1->weight.device();
    output_dtype = forward(batch.data).scalar_type();
    return Regressor::training_step(batch, batch_idx);
  }
  torch::Device batch_device = torch::kCPU;
  torch::Device parameter_device = torch::kCPU;
  c10::ScalarType output_dtype = c10::kFloat;
};

lt::TrainerOptions quiet() {
  return lt::TrainerOptions()
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .default_logger(false)
      .default_root_dir(std::filesystem::temp_directory_path().string());
}

// The largest difference between two modules' parameters, compared in float64 on the CPU.
double max_difference(torch::nn::Module& a, torch::nn::Module& b) {
  auto pa = a.parameters(), pb = b.parameters();
  double out = 0;
  for (size_t i = 0; i < pa.size(); ++i) {
    out = std::max(out, (pa[i].detach().cpu().to(torch::kDouble) - pb[i].detach().cpu().to(torch::kDouble))
                            .abs()
                            .max()
                            .item<double>());
  }
  return out;
}

std::shared_ptr<ProbedRegressor> fit_regressor(lt::TrainerOptions options, bool pin = false, int64_t epochs = 3) {
  torch::manual_seed(5);
  auto model = std::make_shared<ProbedRegressor>();
  lt::Trainer trainer(options.max_epochs(epochs));
  trainer.fit(model, std::make_shared<lt::DataLoader>(regression_data(64), lt::DataLoaderOptions(8).pin_memory(pin)));
  return model;
}

}  // namespace

// accelerator cuda: the module and every batch on the GPU, with pinned
// batches copied asynchronously too; the weights equal the CPU run's within
// float32's differences between devices, and pinning changes nothing.
TEST(CudaTrainer, TrainsOnTheGpuAsOnTheCpu) {
  LT_SKIP_WITHOUT_CUDA();
  auto cpu = fit_regressor(quiet().accelerator("cpu"));
  auto gpu = fit_regressor(quiet().accelerator("cuda"));
  auto pinned = fit_regressor(quiet().accelerator("cuda"), /*pin=*/true);
  EXPECT_TRUE(gpu->batch_device.is_cuda() && gpu->parameter_device.is_cuda()) << gpu->batch_device;
  EXPECT_TRUE(pinned->batch_device.is_cuda());
  EXPECT_LT(max_difference(*cpu, *gpu), 1e-4);
  EXPECT_EQ(max_difference(*gpu, *pinned), 0.0) << "pinned, asynchronous copies changed the result";
}

// A checkpoint written from GPU memory (a storage at a time): the file
// places its tensors on the CPU, a run resumed from it on the GPU equals the
// uninterrupted one, and resumed on the CPU it equals it within float32's
// differences between devices.
TEST(CudaTrainer, ACheckpointFromTheGpuResumesOnTheGpuAndOnTheCpu) {
  LT_SKIP_WITHOUT_CUDA();
  const std::string path = (std::filesystem::temp_directory_path() / "lt_cuda_resume.ckpt").string();
  auto data = regression_data(64);
  torch::manual_seed(5);
  auto first = std::make_shared<Regressor>();
  lt::Trainer two_epochs(quiet().accelerator("cuda").max_epochs(2));
  two_epochs.fit(first, loader(data, 8));
  two_epochs.save_checkpoint(path);
  // The file names the CPU as every tensor's place (as torch.save after .cpu()): it loads on any machine.
  caffe2::serialize::PyTorchStreamReader reader(path);
  const auto [pickle, size] = reader.getRecord("data.pkl");
  const std::string text(static_cast<const char*>(pickle.get()), size);
  EXPECT_EQ(text.find("cuda:"), std::string::npos) << "a tensor placed on a GPU in the checkpoint's pickle";
  EXPECT_NE(text.find("cpu"), std::string::npos);
  auto resume = [&](const std::string& accelerator) {
    auto model = std::make_shared<Regressor>();
    lt::Trainer trainer(quiet().accelerator(accelerator).max_epochs(3));
    trainer.fit(model, loader(data, 8), nullptr, path);
    EXPECT_EQ(trainer.global_step(), 24);
    return model;
  };
  auto on_gpu = resume("cuda");
  auto on_cpu = resume("cpu");
  torch::manual_seed(5);
  auto whole = std::make_shared<Regressor>();
  lt::Trainer three_epochs(quiet().accelerator("cuda").max_epochs(3));
  three_epochs.fit(whole, loader(data, 8));
  EXPECT_LT(max_difference(*on_gpu, *whole), 1e-6);
  EXPECT_LT(max_difference(*on_cpu, *whole), 1e-4);
  std::filesystem::remove(path);
}

// 16-mixed: the forward in float16 under CUDA autocast, the parameters in
// float32, close to 32-true; from a scale that overflows float16's gradients
// the scaler skips steps and backs off until they are finite.
TEST(CudaPrecision, SixteenMixedRunsTheForwardInFloat16AndSkipsOverflowingSteps) {
  LT_SKIP_WITHOUT_CUDA();
  auto full = fit_regressor(quiet().accelerator("cuda"));
  auto mixed = fit_regressor(quiet().accelerator("cuda").precision("16-mixed"));
  EXPECT_EQ(mixed->output_dtype, c10::kHalf);
  EXPECT_EQ(mixed->fc1->weight.scalar_type(), c10::kFloat);
  EXPECT_LT(max_difference(*full, *mixed), 5e-2);
  const double initial = std::ldexp(1.0, 40);
  auto precision = std::make_shared<lt::MixedPrecision>(lt::GradScalerOptions().init_scale(initial));
  auto overflowing = fit_regressor(quiet().accelerator("cuda").precision_plugin(precision));
  EXPECT_LT(precision->scaler().get_scale(), initial) << "no step was skipped";
  for (const auto& p : overflowing->parameters()) EXPECT_TRUE(torch::isfinite(p).all().item<bool>());
}

// bf16-mixed under CUDA autocast (the forward in bfloat16, the parameters
// float32, close to 32-true) and bf16-true (the parameters bfloat16).
TEST(CudaPrecision, Bf16MixedAndBf16TrueOnTheGpu) {
  LT_SKIP_WITHOUT_CUDA();
  auto full = fit_regressor(quiet().accelerator("cuda"));
  auto mixed = fit_regressor(quiet().accelerator("cuda").precision("bf16-mixed"));
  EXPECT_EQ(mixed->output_dtype, c10::kBFloat16);
  EXPECT_EQ(mixed->fc1->weight.scalar_type(), c10::kFloat);
  EXPECT_LT(max_difference(*full, *mixed), 5e-2);
  auto bf16 = fit_regressor(quiet().accelerator("cuda").precision("bf16-true"));
  EXPECT_EQ(bf16->fc1->weight.scalar_type(), c10::kBFloat16);
  EXPECT_TRUE(bf16->parameter_device.is_cuda());
  EXPECT_LT(max_difference(*full, *bf16), 1e-1);
}

// ddp and fsdp FULL_SHARD with one rank on NCCL equal the one-device run.
TEST(CudaStrategies, DdpAndFsdpOnNcclWithOneRankEqualOneDevice) {
  LT_SKIP_WITHOUT_CUDA();
  auto single = fit_regressor(quiet().accelerator("cuda"));
  auto ddp = std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_backend("nccl"));
  auto replicated = fit_regressor(quiet().accelerator("cuda").strategy(ddp).devices(1));
  EXPECT_EQ(ddp->process_group()->getBackendName(), "nccl");
  EXPECT_LT(max_difference(*single, *replicated), 1e-6);
  auto fsdp = std::make_shared<lt::FSDPStrategy>(
      lt::FSDPStrategyOptions().process_group_backend("nccl").sharding_strategy(lt::ShardingStrategy::kFullShard));
  auto sharded = fit_regressor(quiet().accelerator("cuda").strategy(fsdp).devices(1));
  EXPECT_EQ(fsdp->process_group()->getBackendName(), "nccl");
  EXPECT_LT(max_difference(*single, *sharded), 1e-6);
}

// Two ranks on a machine of one GPU, each on the GPU of its local rank: rank
// 1 has none and says so, naming itself.
LT_TEST_WORKER(CudaRankWithoutAGpu) {
  auto ddp = std::make_shared<lt::DDPStrategy>(
      lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(20)));
  lt::Trainer trainer(quiet().accelerator("cuda").strategy(ddp).devices(2).max_epochs(1));
  trainer.fit(std::make_shared<Regressor>(), loader(regression_data(16), 8));
  return 0;
}

TEST(CudaStrategies, ARankWithoutItsOwnGpuIsNamed) {
  LT_SKIP_WITHOUT_CUDA();
  if (torch::cuda::device_count() != 1) GTEST_SKIP() << "for a machine of one GPU";
  lt::testing::WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  auto r = lt::testing::run_workers("CudaRankWithoutAGpu", 2, options);
  ASSERT_EQ(r.outputs.size(), 2u);
  EXPECT_NE(r.outputs[1].find("local rank 1 has no CUDA device (1 visible)"), std::string::npos) << r.summary();
}

// The monitors on the GPU: DeviceStatsMonitor reads the CUDA caching
// allocator (torch.cuda.memory_stats' names) and the device's memory, without
// the CPU's stats unless asked; ThroughputMonitor counts the Regressor's FLOPs
// as on the CPU and takes MFU against the GPU's measured matrix-product rate.
TEST(CudaMonitors, DeviceStatsAndThroughputOnTheGpu) {
  LT_SKIP_WITHOUT_CUDA();
  auto stats = std::make_shared<lt::DeviceStatsMonitor>();
  auto throughput =
      std::make_shared<lt::ThroughputMonitor>(lt::ThroughputMonitorOptions().measure_flops(true).window_size(4));
  auto on_cpu = std::make_shared<lt::ThroughputMonitor>(lt::ThroughputMonitorOptions().measure_flops(true));
  fit_regressor(quiet().accelerator("cuda").log_every_n_steps(1).callbacks({stats, throughput}));
  fit_regressor(quiet().accelerator("cpu").callbacks({on_cpu}));
  const auto& s = stats->last_stats();
  const std::string p = "DeviceStatsMonitor.on_train_batch_end/";
  EXPECT_GT(s.at(p + "allocated_bytes.all.peak"), 0);
  EXPECT_GE(s.at(p + "reserved_bytes.all.current"), s.at(p + "allocated_bytes.all.current"));
  EXPECT_GT(s.at(p + "memory_total_bytes"), 1e9);
  EXPECT_EQ(s.count(p + "cpu_percent"), 0u) << "CPU stats on a GPU run by default";
  EXPECT_GT(on_cpu->flops_per_batch(), 0);
  EXPECT_EQ(throughput->flops_per_batch(), on_cpu->flops_per_batch());
  EXPECT_GT(throughput->peak_flops(), 1e12) << "a GPU's float32 matrix products";
  EXPECT_GT(throughput->last_metrics().at("train/device/mfu"), 0);
}
