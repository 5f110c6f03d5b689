// FlatUnits (plugins/strategies/fsdp/flat_units.h): the partition of a
// module's parameters into units, their flat buffers and a rank's shard. One
// process: no collective runs.

#include <gtest/gtest.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/strategies/fsdp/flat_units.h>

namespace {

// l1 and l3 are declared units; big (a 5x7 Linear: 40 parameters) is one by
// size with min_num_params; small and the frozen layer stay with the root.
struct Net : torch::nn::Module {
  Net() {
    l1 = register_module("l1", lt::FSDPUnit<torch::nn::Linear>(3, 4));   // 16
    small = register_module("small", torch::nn::Linear(4, 2));           // 10
    big = register_module("big", torch::nn::Linear(5, 7));               // 42
    l3 = register_module("l3", lt::FSDPUnit<torch::nn::Linear>(2, 1));   // 3
    frozen = register_module("frozen", torch::nn::Linear(2, 2));
    for (auto& p : frozen->parameters()) p.requires_grad_(false);
  }
  lt::FSDPUnit<torch::nn::Linear> l1{nullptr}, l3{nullptr};
  torch::nn::Linear small{nullptr}, big{nullptr}, frozen{nullptr};
};

int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

TEST(FlatUnits, DeclaredUnitsThenBySizeThenTheRootInParameterOrder) {
  Net net;
  const lt::FlatUnits units(net, /*world_size=*/3, /*rank=*/1, /*min_num_params=*/20);
  ASSERT_EQ(units.parameters().size(), 8u);  // the frozen layer's are not trainable
  EXPECT_EQ(units.names(), (std::vector<std::string>{"l1", "", "big", "l3"}));
  EXPECT_EQ(units[0].params, (std::vector<size_t>{0, 1}));
  EXPECT_EQ(units[1].params, (std::vector<size_t>{2, 3}));  // small: under min_num_params, the root's
  EXPECT_EQ(units[2].params, (std::vector<size_t>{4, 5}));
  EXPECT_EQ(units[3].params, (std::vector<size_t>{6, 7}));
  EXPECT_EQ(units.index_of(*net.l3.get()), 3u);
  EXPECT_EQ(units[0].declared, net.l1.get());
  EXPECT_EQ(units[1].declared, nullptr);
}

TEST(FlatUnits, WithoutAPolicyEveryUndeclaredParameterIsTheRoots) {
  Net net;
  const lt::FlatUnits units(net, 2, 0, /*min_num_params=*/0);
  EXPECT_EQ(units.names(), (std::vector<std::string>{"l1", "", "l3"}));
  EXPECT_EQ(units[1].params, (std::vector<size_t>{2, 3, 4, 5}));
}

TEST(FlatUnits, ChunksArePaddedAndTheShardIsTheRanksChunksEndToEnd) {
  Net net;
  const int64_t world = 3;
  const lt::FlatUnits units(net, world, 2, 20);
  const std::vector<int64_t> numels{16, 10, 42, 3};
  int64_t offset = 0;
  for (size_t u = 0; u < units.size(); ++u) {
    EXPECT_EQ(units[u].chunk, ceil_div(numels[u], world)) << "unit " << u;
    EXPECT_EQ(units[u].shard_offset, offset) << "unit " << u;
    EXPECT_EQ(units.flat_numel(u), world * units[u].chunk);
    offset += units[u].chunk;
  }
  EXPECT_EQ(units.shard_numel(), offset);
  // Offsets: the unit's parameters end to end (l1: weight 12, bias 4).
  EXPECT_EQ(units[0].offsets, (std::vector<int64_t>{0, 12}));
}

TEST(FlatUnits, ParameterViewsAndChunksAddressTheFlatBuffer) {
  Net net;
  const lt::FlatUnits units(net, 3, 1, 20);
  const size_t u = 2;  // big
  const torch::Tensor flat = torch::arange(units.flat_numel(u), torch::kFloat);
  const torch::Tensor bias = units.parameter_view(u, 1, flat);
  EXPECT_EQ(bias.sizes(), net.big->bias.sizes());
  EXPECT_EQ(bias[0].item<float>(), 35.0f);  // after the 7x5 weight
  const torch::Tensor chunk = units.chunk_of_flat(u, flat);
  EXPECT_EQ(chunk.numel(), 14);
  EXPECT_EQ(chunk[0].item<float>(), 14.0f);  // rank 1's
  const torch::Tensor shard = torch::arange(units.shard_numel(), torch::kFloat);
  EXPECT_EQ(units.chunk_of_shard(u, shard)[0].item<float>(), static_cast<float>(units[u].shard_offset));
}

// flatten(values) is, on every rank, its chunks of the units' flat buffers:
// concatenating the ranks' shards unit by unit gives each unit's parameters
// end to end, then zeros.
TEST(FlatUnits, FlattenGivesEachRankItsChunksOfTheParameters) {
  Net net;
  const int64_t world = 3;
  std::vector<torch::Tensor> values;
  {
    const lt::FlatUnits units(net, world, 0, 20);
    for (const auto& p : units.parameters()) values.push_back(torch::randn(p.sizes(), torch::kDouble));
  }
  std::vector<torch::Tensor> shards;
  for (int64_t r = 0; r < world; ++r) shards.push_back(lt::FlatUnits(net, world, r, 20).flatten(values));
  const lt::FlatUnits units(net, world, 0, 20);
  for (size_t u = 0; u < units.size(); ++u) {
    std::vector<torch::Tensor> chunks, params;
    for (int64_t r = 0; r < world; ++r) chunks.push_back(units.chunk_of_shard(u, shards[r]));
    for (size_t i : units[u].params) params.push_back(values[i].reshape(-1));
    const torch::Tensor flat = torch::cat(chunks), expected = torch::cat(params);
    ASSERT_EQ(flat.numel(), units.flat_numel(u));
    EXPECT_TRUE(torch::equal(flat.narrow(0, 0, expected.numel()), expected)) << "unit " << u;
    EXPECT_EQ(flat.narrow(0, expected.numel(), flat.numel() - expected.numel()).abs().sum().item<double>(), 0.0);
  }
}

TEST(FlatUnits, AParameterRegisteredTwiceIsOneParameter) {
  struct Tied : torch::nn::Module {
    Tied() {
      const torch::Tensor w = torch::randn({2});
      register_parameter("w1", w);
      register_parameter("w2", w);
      register_parameter("b", torch::randn({3}));
    }
  } net;
  const lt::FlatUnits units(net, 2, 0, 0);
  EXPECT_EQ(units.parameters().size(), 2u);
  EXPECT_EQ(units[0].chunk, 3);  // ceil(5 / 2)
}

TEST(FlatUnits, AUnitMixingDtypesIsRefusedByName) {
  Net net;
  net.l1->module->bias.set_data(net.l1->module->bias.to(torch::kDouble));
  try {
    lt::FlatUnits units(net, 2, 0, 0);
    FAIL() << "a unit with float and double parameters was accepted";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("unit 'l1'"), std::string::npos) << e.what();
  }
}

TEST(FlatUnits, AModuleWithoutTrainableParametersIsRefused) {
  torch::nn::Linear frozen(2, 2);
  for (auto& p : frozen->parameters()) p.requires_grad_(false);
  EXPECT_THROW(lt::FlatUnits(*frozen, 2, 0, 0), lt::Error);
}

}  // namespace
