// DDP's ddp_comm_hook fp16_compress_hook (plugins/strategies/ddp) under Join
// on even and uneven ranks against PyTorch's DDP + Join with its hook
// (tests/python/comm_hook_oracle.py, tests/fixtures/comm_hook_fp16.txt).
// Real worker processes over Gloo.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/join/join_fixture.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using lt::testing::WorkerOptions;
using namespace lt::testing;  // the Join oracle's model, data and fixtures (join_oracle.h, join_fixture.h)

// ddp_comm_hook fp16_compress_hook: every bucket (a joined rank's zero
// buckets too) cast to float16 and divided by the world size before the
// allreduce gives PyTorch's DDP + Join with its fp16_compress_hook
// (tests/python/comm_hook_oracle.py), on 5/5 and 5/8 batches; without the
// hook the parameters differ by more than float16's rounding.
LT_TEST_WORKER(CommHookFp16) {
  const int rank = env_int("RANK");
  auto strategy = make_strategy();
  struct Expected {
    std::vector<int64_t> counts;
    std::vector<double> params;
  };
  const auto expected = read_fixture<Expected>("comm_hook_fp16.txt", [](std::istream& ss, Expected& e) {
    std::string counts;
    ss >> counts;
    e.counts = parse_counts(counts);
  });
  LT_WORKER_CHECK(expected.size() == 2, "comm_hook_fp16.txt: ", expected.size(), " configurations");
  for (const Expected& e : expected) {
    auto train = [&](lt::DDPCommHook hook) {
      strategy->options().ddp_comm_hook(hook);
      auto model = std::make_shared<JoinNet>();
      lt::Trainer trainer(base_options(strategy, 2));
      trainer.fit(model, rank_loader(rank, e.counts[rank]));
      strategy->options().ddp_comm_hook(lt::DDPCommHook::kAllreduce);
      return model->flat();
    };
    const torch::Tensor want = torch::tensor(e.params, torch::kDouble);
    const double fp16 = (train(lt::DDPCommHook::kFp16Compress) - want).abs().max().item<double>();
    LT_WORKER_CHECK(fp16 <= 1e-12, "counts ", e.counts[0], ",", e.counts[1], ": fp16_compress_hook differs from "
                    "PyTorch's by ", fp16);
    const double fp32 = (train(lt::DDPCommHook::kAllreduce) - want).abs().max().item<double>();
    LT_WORKER_CHECK(fp32 > 1e-6, "counts ", e.counts[0], ",", e.counts[1], ": without the hook the parameters "
                    "differ from the compressed run's by only ", fp32);
  }
  // bf16 needs NCCL: on gloo a clear error before the first step.
  strategy->options().ddp_comm_hook(lt::DDPCommHook::kBf16Compress);
  std::string error = "<trained>";
  try {
    lt::Trainer trainer(base_options(strategy, 2));
    trainer.fit(std::make_shared<JoinNet>(), rank_loader(rank, 2));
  } catch (const lt::ValueError& e) {
    error = e.what();
  }
  strategy->options().ddp_comm_hook(lt::DDPCommHook::kAllreduce);
  LT_WORKER_CHECK(error.find("bf16_compress_hook needs the nccl backend") != std::string::npos, error);
  return 0;
}

TEST(JoinCommHook, Fp16CompressionEqualsPyTorchsHookUnderJoin) {
  expect_workers_pass("CommHookFp16", 2, std::chrono::seconds(60));
}
