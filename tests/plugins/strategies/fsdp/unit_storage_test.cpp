// UnitStorage (plugins/strategies/fsdp/unit_storage.h): a unit's flat buffer
// freed and given bytes again under the views autograd keeps, and the CPU's
// block pool.

#include <gtest/gtest.h>

#include <lightning_cpp/plugins/strategies/fsdp/unit_storage.h>

namespace {

TEST(UnitStorage, FreeingKeepsTheViewsAndMaterializingGivesThemBytesAgain) {
  lt::UnitStorage storage;
  const size_t u = storage.add(6, torch::kFloat);
  const torch::Tensor view = storage.full(u).narrow(0, 2, 4).view({2, 2});  // a parameter's
  EXPECT_TRUE(storage.materialized(u));
  storage.free(u);
  EXPECT_FALSE(storage.materialized(u));
  EXPECT_EQ(storage.full(u).storage().nbytes(), 0u);
  EXPECT_EQ(storage.full(u).numel(), 6);  // sizes kept
  storage.materialize(u);
  EXPECT_EQ(storage.full(u).storage().nbytes(), 6 * sizeof(float));
  storage.full(u).copy_(torch::arange(6, torch::kFloat));
  EXPECT_TRUE(torch::equal(view, torch::tensor({{2.f, 3.f}, {4.f, 5.f}})));  // the same bytes
}

TEST(UnitStorage, FreeAndMaterializeAreIdempotent) {
  lt::UnitStorage storage;
  const size_t u = storage.add(4, torch::kDouble);
  storage.full(u).fill_(1.0);
  storage.materialize(u);  // whole already: nothing happens to the values
  EXPECT_EQ(storage.full(u).sum().item<double>(), 4.0);
  storage.free(u);
  storage.free(u);
  EXPECT_FALSE(storage.materialized(u));
}

TEST(UnitStorage, TheCpuPoolHandsAFreedBlockOutAgain) {
  lt::UnitStorage storage;
  const size_t a = storage.add(1024, torch::kFloat);
  storage.free(a);
  storage.materialize(a);
  const void* block = storage.full(a).data_ptr();
  storage.free(a);
  // An allocation of the same size in between: the C heap would hand it the
  // freed block; the pool keeps the block for the unit.
  const torch::Tensor other = torch::empty({1024}, torch::kFloat);
  storage.materialize(a);
  EXPECT_EQ(storage.full(a).data_ptr(), block);
  // A buffer of the unit's size takes a block of that size, given back when it dies.
  storage.free(a);
  {
    const torch::Tensor buffer = storage.buffer(a);
    EXPECT_EQ(buffer.numel(), 1024);
    EXPECT_EQ(buffer.scalar_type(), torch::kFloat);
    EXPECT_EQ(buffer.data_ptr(), block);
  }
  const torch::Tensor other2 = torch::empty({1024}, torch::kFloat);
  storage.materialize(a);
  EXPECT_EQ(storage.full(a).data_ptr(), block);
}

TEST(UnitStorage, TwoBuffersAliveAreTwoBlocks) {
  lt::UnitStorage storage;
  const size_t u = storage.add(16, torch::kFloat);
  const torch::Tensor a = storage.buffer(u), b = storage.buffer(u);
  EXPECT_NE(a.data_ptr(), b.data_ptr());
  EXPECT_NE(a.data_ptr(), storage.full(u).data_ptr());
}

}  // namespace
