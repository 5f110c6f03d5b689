#pragma once
// What the data_loader_test binary's files share: the seeded fixture (torch's
// own threads started before a test counts threads) and the count of this
// process's threads.
#include <cstdint>
#include <filesystem>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include "support/seeding.h"

namespace lt::testing {

inline int64_t count_threads() {
  int64_t n = 0;
  for ([[maybe_unused]] const auto& entry : std::filesystem::directory_iterator("/proc/self/task")) ++n;
  return n;
}

}  // namespace lt::testing

// One type for every file's TEST_F(DataLoaderWorkersTest, ...): gtest requires a test suite's tests to share
// their fixture class.
struct DataLoaderWorkersTest : lt::testing::SeedingFixture {
  void SetUp() override {
    SeedingFixture::SetUp();
    // Any thread torch starts for itself (intra-op pool) exists before a test counts threads.
    (void)torch::randn({256, 256}).matmul(torch::randn({256, 256})).sum().item<float>();
  }
};
