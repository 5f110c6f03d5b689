#pragma once
#include <gtest/gtest.h>
#include <torch/torch.h>

namespace lt::testing {
// Seeds torch before each test, as LibTorch's own tests do.
struct SeedingFixture : ::testing::Test {
  void SetUp() override { torch::manual_seed(0); }
};
}  // namespace lt::testing
