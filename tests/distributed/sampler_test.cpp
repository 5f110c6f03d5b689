// DistributedSampler against PyTorch's torch.utils.data.DistributedSampler
// (the checked-in fixture, made by tests/python/make_sampler_fixture.py with
// torch 1.13; torch 2.11 gives the same). The cluster environments: tests/environments_test.cpp.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/data/data_loader.h>
#include <lightning_cpp/data/distributed_sampler.h>

namespace {

struct FixtureCase {
  std::string mode;
  int64_t n, world, rank, seed, epoch;
  bool shuffle, drop_last;
  std::vector<int64_t> expected;
  std::string line;
};

std::vector<FixtureCase> parse_fixture(std::istream& in) {
  std::vector<FixtureCase> out;
  std::string line;
  while (std::getline(in, line)) {
    if (line.empty() || line[0] == '#') continue;
    std::istringstream ss(line);
    FixtureCase c;
    int shuffle = 0, drop_last = 0;
    std::string colon;
    ss >> c.mode >> c.n >> c.world >> c.rank >> c.seed >> c.epoch >> shuffle >> drop_last >> colon;
    c.shuffle = shuffle != 0;
    c.drop_last = drop_last != 0;
    int64_t i = 0;
    while (ss >> i) c.expected.push_back(i);
    c.line = line.substr(0, line.find(':'));
    out.push_back(std::move(c));
  }
  return out;
}

std::string fixture_path() { return std::string(LT_SOURCE_DIR) + "/tests/distributed/sampler_fixture.txt"; }

std::vector<int64_t> sample(const FixtureCase& c) {
  lt::DistributedSampler sampler(c.n, lt::DistributedSamplerOptions(c.world, c.rank)
                                          .shuffle(c.shuffle)
                                          .seed(static_cast<uint64_t>(c.seed))
                                          .drop_last(c.drop_last)
                                          .pad(c.mode == "pad"));
  sampler.set_epoch(c.epoch);
  return sampler.indices();
}

}  // namespace

TEST(DistributedSampler, IndexListsEqualPyTorchs) {
  std::ifstream in(fixture_path());
  ASSERT_TRUE(in.good()) << "missing " << fixture_path();
  const auto cases = parse_fixture(in);
  ASSERT_GT(cases.size(), 1000u);
  int checked = 0;
  for (const auto& c : cases) {
    EXPECT_EQ(sample(c), c.expected) << c.line;
    ++checked;
  }
  EXPECT_EQ(checked, static_cast<int>(cases.size()));
}

TEST(DistributedSampler, FixtureIsWhatThisPyTorchGives) {
  // Regenerates the fixture with the oracle when it is installed; the
  // checked-in file must be what it prints.
  if (std::system((std::string(LT_PYTHON) + " -c 'import torch' >/dev/null 2>&1").c_str()) != 0) {
    GTEST_SKIP() << LT_PYTHON << " with torch is not installed";
  }
  const std::string cmd = std::string(LT_PYTHON) + " " + LT_SOURCE_DIR + "/tests/python/make_sampler_fixture.py";
  FILE* pipe = ::popen(cmd.c_str(), "r");
  ASSERT_NE(pipe, nullptr);
  std::string generated;
  char buf[4096];
  size_t n = 0;
  while ((n = std::fread(buf, 1, sizeof(buf), pipe)) > 0) generated.append(buf, n);
  ASSERT_EQ(::pclose(pipe), 0);
  std::ifstream in(fixture_path());
  std::stringstream stored;
  stored << in.rdbuf();
  // The first line names the torch that wrote the file: every version since 1.13 gives the same rest.
  const auto body = [](const std::string& text) { return text.substr(text.find('\n') + 1); };
  EXPECT_EQ(body(generated), body(stored.str()))
      << "regenerate: " LT_PYTHON " tests/python/make_sampler_fixture.py > tests/distributed/sampler_fixture.txt";
}

TEST(DistributedSampler, NoPaddingShardsPartitionThePermutation) {
  for (int64_t n : {0, 1, 5, 23, 64}) {
    for (int64_t world : {1, 2, 3, 5}) {
      std::multiset<int64_t> all;
      int64_t smallest = n, largest = 0;
      for (int64_t rank = 0; rank < world; ++rank) {
        lt::DistributedSampler s(n, lt::DistributedSamplerOptions(world, rank).seed(7).pad(false));
        const auto idx = s.indices(2);
        EXPECT_EQ(static_cast<int64_t>(idx.size()), s.num_samples());
        smallest = std::min<int64_t>(smallest, idx.size());
        largest = std::max<int64_t>(largest, idx.size());
        all.insert(idx.begin(), idx.end());
      }
      EXPECT_EQ(static_cast<int64_t>(all.size()), n) << "n=" << n << " world=" << world;
      EXPECT_EQ(static_cast<int64_t>(std::set<int64_t>(all.begin(), all.end()).size()), n) << "an index repeats";
      EXPECT_LE(largest - smallest, 1);
    }
  }
}

TEST(DistributedSampler, SetEpochChangesTheOrderAndTheLoaderFollows) {
  lt::DistributedSampler s(50, lt::DistributedSamplerOptions(2, 1).seed(3));
  s.set_epoch(0);
  const auto e0 = s.indices();
  s.set_epoch(1);
  EXPECT_NE(s.indices(), e0);
  EXPECT_EQ(s.indices(), s.indices(1));

  auto data = std::make_shared<lt::TensorDataset>(torch::arange(50).unsqueeze(1));
  lt::DataLoader loader(data, lt::DataLoaderOptions(4));
  loader.set_sampler(std::make_shared<lt::DistributedSampler>(50, lt::DistributedSamplerOptions(2, 1).seed(3)));
  EXPECT_EQ(loader.size(), 7);  // 25 samples in batches of 4
  loader.set_epoch(1);
  const auto expected = s.indices(1);
  EXPECT_EQ(loader.get(0).data.flatten()[0].item<int64_t>(), expected[0]);
}

TEST(DistributedSampler, RejectsABadRank) {
  EXPECT_THROW(lt::DistributedSampler(10, lt::DistributedSamplerOptions(2, 2)), lt::Error);
  EXPECT_THROW(lt::DistributedSampler(10, lt::DistributedSamplerOptions(0, 0)), lt::Error);
}
