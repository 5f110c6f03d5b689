// Launching with the real /usr/bin/torchrun (Debian's python3-torch 1.13):
// one node of 2 ranks and 2 nodes of 1 rank on 127.0.0.1, with torchrun's
// static rendezvous (its agent hosts the store the workers must join as
// clients), its c10d rendezvous and --standalone. No strategy is given: the
// Trainer picks ddp from the environment. Each run's final weights must equal
// those of the local spawn (devices: 2) with the same data.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>

#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/strategies/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"

using lt::testing::env_str;

namespace {

constexpr const char* kTorchrun = "/usr/bin/torchrun";

class SmallNet : public lt::LightningModule {
 public:
  SmallNet() {
    fc1 = register_module("fc1", torch::nn::Linear(6, 8));
    fc2 = register_module("fc2", torch::nn::Linear(8, 2));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return torch::mse_loss(fc2(torch::tanh(fc1(batch.data))), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};

}  // namespace

// LT_MODE=spawn: devices 2 with the ddp strategy (this binary re-executed as
// its workers). Otherwise a rank started by torchrun, with no strategy given.
LT_TEST_WORKER(TorchrunFit) {
  const bool spawn = env_str("LT_MODE") == "spawn";
  torch::manual_seed(0);
  auto net = std::make_shared<SmallNet>();
  auto gen = at::detail::createCPUGenerator(7);
  const torch::Tensor x = torch::randn({48, 6}, gen), y = torch::randn({48, 2}, gen);
  auto options = lt::TrainerOptions().max_epochs(2).enable_progress_bar(false).default_root_dir(env_str("LT_OUT"));
  if (spawn) options.devices(2).strategy(std::make_shared<lt::DDPStrategy>());
  lt::Trainer trainer(options);
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                                 lt::DataLoaderOptions(4).shuffle(true).seed(3));
  trainer.fit(net, loader);  // a spawn's supervisor launches, waits and exits here
  LT_WORKER_CHECK(trainer.strategy().name() == "ddp", "strategy ", trainer.strategy().name());
  LT_WORKER_CHECK(trainer.strategy().world_size() == 2, "world size ", trainer.strategy().world_size());
  std::vector<torch::Tensor> params;
  for (const auto& p : net->parameters()) params.push_back(p.detach().clone());
  torch::save(params, env_str("LT_OUT") + "/rank" + std::to_string(trainer.strategy().global_rank()) + ".pt");
  return 0;
}

namespace {

std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("lt_torchrun_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

// Runs the commands (each a whole launcher: torchrun, or this binary as a
// supervisor) side by side; true when all exit 0, else a report in `why`.
bool run_launchers(const std::string& dir, const std::vector<std::vector<std::string>>& commands,
                   std::map<std::string, std::string> env, std::string* why) {
  env["LT_TEST_WORKER"] = "TorchrunFit";
  env["LT_OUT"] = dir;
  std::vector<lt::WorkerSpec> specs;
  for (size_t i = 0; i < commands.size(); ++i) {
    lt::WorkerSpec spec;
    spec.argv = commands[i];
    spec.env = env;
    spec.output_path = dir + "/launcher" + std::to_string(i) + ".log";
    specs.push_back(spec);
  }
  const auto exits = lt::launch_and_wait(specs, lt::LaunchOptions{std::chrono::seconds(120)});
  bool ok = true;
  for (size_t i = 0; i < exits.size(); ++i) {
    if (exits[i].ok()) continue;
    ok = false;
    *why += "launcher " + std::to_string(i) + ": " + exits[i].describe() + "\n" + read_file(specs[i].output_path);
  }
  return ok;
}

std::vector<torch::Tensor> load_params(const std::string& path) {
  std::vector<torch::Tensor> t;
  torch::load(t, path);
  return t;
}

// The local spawn's weights, computed once.
const std::vector<torch::Tensor>& reference() {
  static const std::vector<torch::Tensor> params = [] {
    const std::string dir = fresh_dir("spawn");
    std::string why;
    EXPECT_TRUE(run_launchers(dir, {{lt::self_executable()}}, {{"LT_MODE", "spawn"}}, &why)) << why;
    auto out = load_params(dir + "/rank0.pt");
    std::filesystem::remove_all(dir);
    return out;
  }();
  return params;
}

std::vector<std::string> torchrun(std::vector<std::string> args) {
  // Python 3.11's torchrun needs nonzero --redirects and --tee ('NoneType' object has no attribute 'get').
  std::vector<std::string> out = {kTorchrun, "--no_python", "-r", "2", "-t", "2"};
  out.insert(out.end(), args.begin(), args.end());
  out.push_back(lt::self_executable());
  return out;
}

// Every rank of the run in `dir` ended with the local spawn's weights.
void expect_reference_weights(const std::string& dir) {
  const auto& expected = reference();
  ASSERT_FALSE(expected.empty());
  for (int rank = 0; rank < 2; ++rank) {
    const std::string path = dir + "/rank" + std::to_string(rank) + ".pt";
    ASSERT_TRUE(std::filesystem::exists(path)) << path;
    const auto got = load_params(path);
    ASSERT_EQ(got.size(), expected.size());
    for (size_t i = 0; i < got.size(); ++i) {
      EXPECT_TRUE(got[i].equal(expected[i])) << "rank " << rank << ", parameter " << i << ": max difference "
                                             << (got[i] - expected[i]).abs().max().item<double>();
    }
  }
}

class Torchrun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(kTorchrun)) GTEST_SKIP() << kTorchrun << " is not installed (python3-torch)";
  }
};

}  // namespace

TEST_F(Torchrun, OneNodeOfTwoRanksWithTheAgentsStore) {
  const std::string dir = fresh_dir("static");
  std::string why;
  const std::string port = std::to_string(lt::find_free_port());
  ASSERT_TRUE(run_launchers(dir, {torchrun({"--nproc_per_node", "2", "--master_port", port, "--log_dir", dir + "/logs"})},
                            {}, &why))
      << why;
  EXPECT_NE(read_file(dir + "/launcher0.log").find("no strategy given and the environment has 2 ranks"),
            std::string::npos);
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}

TEST_F(Torchrun, TwoStaticNodesOfOneRank) {
  const std::string dir = fresh_dir("two_nodes");
  const std::string port = std::to_string(lt::find_free_port());
  std::vector<std::vector<std::string>> nodes;
  for (const char* node : {"0", "1"}) {
    nodes.push_back(torchrun({"--nnodes", "2", "--node_rank", node, "--nproc_per_node", "1", "--master_addr",
                              "127.0.0.1", "--master_port", port, "--log_dir", dir + "/logs" + node}));
  }
  std::string why;
  ASSERT_TRUE(run_launchers(dir, nodes, {}, &why)) << why;
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}

TEST_F(Torchrun, TwoNodesThroughTheC10dRendezvous) {
  const std::string dir = fresh_dir("c10d");
  const std::string endpoint = "127.0.0.1:" + std::to_string(lt::find_free_port());
  std::vector<std::vector<std::string>> nodes;
  for (const char* node : {"0", "1"}) {
    nodes.push_back(torchrun({"--nnodes", "2", "--nproc_per_node", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                              endpoint, "--rdzv_id", "lt_test", "--log_dir", dir + "/logs" + node}));
  }
  std::string why;
  ASSERT_TRUE(run_launchers(dir, nodes, {}, &why)) << why;
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}

TEST_F(Torchrun, Standalone) {
  const std::string dir = fresh_dir("standalone");
  std::string why;
  ASSERT_TRUE(run_launchers(dir, {torchrun({"--standalone", "--nproc_per_node", "2", "--log_dir", dir + "/logs"})}, {},
                            &why))
      << why;
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}
