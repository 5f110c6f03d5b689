#pragma once
// What the Cuda tests share. A test whose suite starts with Cuda gets the
// ctest label cuda (tests/CMakeLists.txt), which scripts/gpu_check.sh runs on
// a GPU machine; without a GPU it skips.
#include <gtest/gtest.h>

#include <chrono>
#include <string>

#include <torch/cuda.h>

#include "support/multiprocess.h"

// A Cuda test's first line.
#define LT_SKIP_WITHOUT_CUDA() \
  if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device visible"

namespace lt::testing {

// `ranks` workers sharing the one GPU: each is told it is local rank 0 of 1
// (torchrun's variables for single-GPU nodes), the workers' fixtures put
// their runs on CUDA (LT_TEST_ACCELERATOR) and their collectives on Gloo
// (LT_TEST_BACKEND): NCCL refuses two ranks on one device.
inline WorkerOptions sharing_one_gpu(int ranks, WorkerOptions options) {
  options.env["LT_TEST_ACCELERATOR"] = "cuda";
  options.env["LT_TEST_BACKEND"] = "gloo";
  options.rank_env.resize(ranks);
  for (int r = 0; r < ranks; ++r) {
    options.rank_env[r]["LOCAL_RANK"] = "0";
    options.rank_env[r]["LOCAL_WORLD_SIZE"] = "1";
    options.rank_env[r]["GROUP_RANK"] = std::to_string(r);
  }
  return options;
}

// Runs `worker` on `ranks` processes sharing the one GPU; a gtest failure
// unless every rank passes.
inline void expect_workers_pass_on_one_gpu(const std::string& worker, int ranks, std::chrono::seconds timeout,
                                           WorkerOptions options = {}) {
  options.timeout = timeout;
  const WorkersResult r = run_workers(worker, ranks, sharing_one_gpu(ranks, options));
  EXPECT_TRUE(r.ok()) << r.summary();
}

}  // namespace lt::testing
