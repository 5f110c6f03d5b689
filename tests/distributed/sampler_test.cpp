// DistributedSampler against PyTorch's torch.utils.data.DistributedSampler
// (the checked-in fixture, made by tests/python/make_sampler_fixture.py with
// Debian's python3-torch 1.13), and the cluster environments' parsing.
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
#include <lightning_cpp/plugins/environments/cluster_environment.h>
#include <lightning_cpp/plugins/environments/local.h>
#include <lightning_cpp/plugins/environments/mpi.h>
#include <lightning_cpp/plugins/environments/slurm.h>
#include <lightning_cpp/plugins/environments/torchrun.h>

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

// Sets environment variables for one scope and restores them after, so
// nothing leaks into the worker processes other tests start.
class ScopedEnv {
 public:
  explicit ScopedEnv(const std::map<std::string, std::optional<std::string>>& vars) {
    for (const auto& [k, v] : vars) {
      const char* old = std::getenv(k.c_str());
      saved_[k] = old ? std::optional<std::string>(old) : std::nullopt;
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }
  ~ScopedEnv() {
    for (const auto& [k, v] : saved_) {
      if (v) ::setenv(k.c_str(), v->c_str(), 1);
      else ::unsetenv(k.c_str());
    }
  }

 private:
  std::map<std::string, std::optional<std::string>> saved_;
};

// Every variable any environment looks at, unset.
std::map<std::string, std::optional<std::string>> clean_env() {
  std::map<std::string, std::optional<std::string>> vars;
  for (const char* k : {"LT_LOCAL_SPAWN", "RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
                        "MASTER_PORT", "GROUP_RANK", "NODE_RANK", "TORCHELASTIC_RUN_ID", "SLURM_NTASKS",
                        "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NODELIST", "SLURM_JOB_NODELIST",
                        "SLURM_JOB_ID", "SLURM_JOB_NAME", "SLURM_NTASKS_PER_NODE", "OMPI_COMM_WORLD_SIZE",
                        "OMPI_COMM_WORLD_RANK", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
                        "OMPI_COMM_WORLD_NODE_RANK", "OMPI_MCA_ess_base_jobid", "PMIX_NAMESPACE", "PMI_KVSNAME",
                        "PMI_RANK", "PMI_SIZE", "MPI_LOCALRANKID", "MPI_LOCALNRANKS"}) {
    vars[k] = std::nullopt;
  }
  return vars;
}

std::map<std::string, std::optional<std::string>> with(std::map<std::string, std::optional<std::string>> base,
                                                       const std::map<std::string, std::string>& set) {
  for (const auto& [k, v] : set) base[k] = v;
  return base;
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
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    GTEST_SKIP() << "/usr/bin/python3 with torch is not installed";
  }
  const std::string cmd = "/usr/bin/python3 " + std::string(LT_SOURCE_DIR) + "/tests/python/make_sampler_fixture.py";
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
  EXPECT_EQ(generated, stored.str()) << "regenerate: /usr/bin/python3 tests/python/make_sampler_fixture.py > "
                                        "tests/distributed/sampler_fixture.txt";
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

TEST(ClusterEnvironment, NoVariablesMeansALocalSpawnSupervisor) {
  ScopedEnv env(clean_env());
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "local");
  EXPECT_FALSE(e->creates_processes_externally());
}

TEST(ClusterEnvironment, LocalSpawnWorker) {
  ScopedEnv env(with(clean_env(), {{"LT_LOCAL_SPAWN", "1"}, {"RANK", "2"}, {"WORLD_SIZE", "3"},
                                   {"MASTER_ADDR", "127.0.0.1"}, {"MASTER_PORT", "1234"}}));
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "local");
  EXPECT_TRUE(e->creates_processes_externally());
  EXPECT_EQ(e->global_rank(), 2);
  EXPECT_EQ(e->world_size(), 3);
  EXPECT_EQ(e->main_port(), 1234);
}

TEST(ClusterEnvironment, TorchrunVariables) {
  ScopedEnv env(with(clean_env(), {{"RANK", "5"}, {"WORLD_SIZE", "8"}, {"LOCAL_RANK", "1"}, {"LOCAL_WORLD_SIZE", "4"},
                                   {"GROUP_RANK", "1"}, {"MASTER_ADDR", "10.0.0.1"}, {"MASTER_PORT", "29500"},
                                   {"TORCHELASTIC_RUN_ID", "x"}}));
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "torchrun");
  EXPECT_EQ(e->global_rank(), 5);
  EXPECT_EQ(e->world_size(), 8);
  EXPECT_EQ(e->local_rank(), 1);
  EXPECT_EQ(e->node_rank(), 1);
  EXPECT_EQ(e->main_address(), "10.0.0.1");
  EXPECT_EQ(e->main_port(), 29500);
}

TEST(ClusterEnvironment, GenericVariablesNeedARendezvous) {
  ScopedEnv env(with(clean_env(), {{"RANK", "0"}, {"WORLD_SIZE", "2"}}));
  try {
    lt::select_cluster_environment();
    FAIL() << "expected an error";
  } catch (const lt::Error& e) {
    EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
  }
}

TEST(ClusterEnvironment, Slurm) {
  ScopedEnv env(with(clean_env(), {{"SLURM_NTASKS", "8"}, {"SLURM_PROCID", "3"}, {"SLURM_LOCALID", "3"},
                                   {"SLURM_NODEID", "0"}, {"SLURM_NODELIST", "gpu[017-018,020],cpu1"},
                                   {"SLURM_JOB_ID", "123456789"}, {"SLURM_JOB_NAME", "train"}}));
  auto e = lt::select_cluster_environment();
  EXPECT_EQ(e->name(), "slurm");
  EXPECT_EQ(e->global_rank(), 3);
  EXPECT_EQ(e->world_size(), 8);
  EXPECT_EQ(e->main_address(), "gpu017");
  EXPECT_EQ(e->main_port(), 15000 + 6789);
}

TEST(ClusterEnvironment, SlurmInteractiveShellIsNotALaunch) {
  ScopedEnv env(with(clean_env(), {{"SLURM_NTASKS", "1"}, {"SLURM_PROCID", "0"}, {"SLURM_JOB_NAME", "bash"}}));
  EXPECT_EQ(lt::select_cluster_environment()->name(), "local");
}

TEST(ClusterEnvironment, SlurmNodelistForms) {
  using lt::SlurmEnvironment;
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("host1"), "host1");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("host1,host2"), "host1");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("node[7]"), "node7");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("node[003-005,9],gpu1"), "node003");
  EXPECT_EQ(SlurmEnvironment::resolve_root_node_address("a[1,2]"), "a1");
}

TEST(ClusterEnvironment, OpenMpiAndMpich) {
  {
    ScopedEnv env(with(clean_env(), {{"OMPI_COMM_WORLD_SIZE", "4"}, {"OMPI_COMM_WORLD_RANK", "2"},
                                     {"OMPI_COMM_WORLD_LOCAL_RANK", "2"}, {"OMPI_COMM_WORLD_LOCAL_SIZE", "4"}}));
    auto e = lt::select_cluster_environment();
    EXPECT_EQ(e->name(), "openmpi");
    EXPECT_EQ(e->global_rank(), 2);
    EXPECT_EQ(e->local_rank(), 2);
    EXPECT_EQ(e->main_address(), "127.0.0.1");  // single node: loopback
    EXPECT_GT(e->main_port(), 0);
  }
  {
    ScopedEnv env(with(clean_env(), {{"PMI_SIZE", "4"}, {"PMI_RANK", "1"}, {"MPI_LOCALNRANKS", "2"},
                                     {"MPI_LOCALRANKID", "1"}}));
    try {
      lt::select_cluster_environment();
      FAIL() << "two nodes without MASTER_ADDR must be refused";
    } catch (const lt::Error& e) {
      EXPECT_NE(std::string(e.what()).find("MASTER_ADDR"), std::string::npos) << e.what();
    }
  }
  {
    ScopedEnv env(with(clean_env(), {{"PMI_SIZE", "4"}, {"PMI_RANK", "3"}, {"MPI_LOCALNRANKS", "2"},
                                     {"MPI_LOCALRANKID", "1"}, {"MASTER_ADDR", "n0"}, {"MASTER_PORT", "2222"}}));
    auto e = lt::select_cluster_environment();
    EXPECT_EQ(e->name(), "mpich");
    EXPECT_EQ(e->node_rank(), 1);
    EXPECT_EQ(e->main_address(), "n0");
  }
}
