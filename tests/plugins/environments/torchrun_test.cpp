// Launching with the real torchrun of the PyTorch built against (LT_TORCHRUN):
// one node of 2 ranks and 2 nodes of 1 rank on 127.0.0.1, with torchrun's
// static rendezvous (its agent hosts the store the workers must join as
// clients), its c10d rendezvous and --standalone; and two hosts made of
// network namespaces joined by a veth pair. No strategy is given: the
// Trainer picks ddp from the environment. Each run's final weights must equal
// those of the local spawn (devices: 2) with the same data.
// This file: plugins/environments/torchrun.h on one host (the TorchrunFit
// worker every launch runs, and torchrun's static, c10d and standalone
// rendezvous, Fabric, a restarted group).
#include <gtest/gtest.h>

#include <signal.h>
#include <unistd.h>

#include <torch/version.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <iostream>
#include <memory>
#include <regex>
#include <sstream>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/plugins/launchers/error_file.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/plugins/strategies/fsdp/fsdp.h>
#include <lightning_cpp/fabric/fabric.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/environments/torchrun_fixture.h"
#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::read_file;
// kTorchrun, the launchers and the reference weights (plugins/environments/torchrun_fixture.h).
using namespace lt::testing;

namespace {

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
// its workers); manual: num_nodes 2 with the ddp strategy, on each node with
// MASTER_ADDR, MASTER_PORT and NODE_RANK set. Otherwise a rank started by
// torchrun, with no strategy given.
LT_TEST_WORKER(TorchrunFit) {
  const bool spawn = env_str("LT_MODE") == "spawn";
  const bool manual = env_str("LT_MODE") == "manual";
  torch::manual_seed(0);
  auto net = std::make_shared<SmallNet>();
  auto gen = at::detail::createCPUGenerator(7);
  const torch::Tensor x = torch::randn({48, 6}, gen), y = torch::randn({48, 2}, gen);
  auto options = lt::TrainerOptions().max_epochs(2).enable_progress_bar(false).default_root_dir(env_str("LT_OUT"));
  if (env_str("LT_MODE") == "hybrid") {
    // fsdp HYBRID_SHARD (fc1 and fc2 units by size) and ddp on each rank's own
    // data, 2 to 5 batches (lockstep Join): the same weights on every rank.
    const int64_t rank = lt::rank_zero_env_rank();
    auto own = std::make_shared<lt::DataLoader>(
        std::make_shared<lt::TensorDataset>(x.narrow(0, 0, 8 + 4 * rank), y.narrow(0, 0, 8 + 4 * rank)),
        lt::DataLoaderOptions(4));
    options.use_distributed_sampler(false).accumulate_grad_batches(2).default_logger(false);
    std::vector<torch::Tensor> weights;
    for (const bool hybrid : {true, false}) {
      torch::manual_seed(0);
      auto model = std::make_shared<SmallNet>();
      std::shared_ptr<lt::Strategy> strategy = std::make_shared<lt::DDPStrategy>();
      if (hybrid) {
        strategy = std::make_shared<lt::FSDPStrategy>(lt::FSDPStrategyOptions()
                                                          .sharding_strategy(lt::ShardingStrategy::kHybridShard)
                                                          .auto_wrap_min_num_params(10));
      }
      lt::Trainer trainer(lt::TrainerOptions(options).strategy(strategy));
      trainer.fit(model, own);
      std::vector<torch::Tensor> params;
      for (const auto& p : model->parameters()) params.push_back(p.detach().reshape(-1));
      weights.push_back(torch::cat(params));
      LT_WORKER_CHECK(trainer.strategy().world_size() == 4, "world size ", trainer.strategy().world_size());
    }
    const double differ = (weights[0] - weights[1]).abs().max().item<double>();
    LT_WORKER_CHECK(differ <= 1e-6, "HYBRID_SHARD's weights differ from ddp's by ", differ);
    torch::save(weights, env_str("LT_OUT") + "/rank" + std::to_string(rank) + ".pt");
    return 0;
  }
  if (spawn) options.devices(2).strategy(std::make_shared<lt::DDPStrategy>());
  if (manual) options.num_nodes(2).strategy(std::make_shared<lt::DDPStrategy>());
  if (env_str("LT_MODE") == "elastic") {
    // Checkpoints every 2 steps; in torchrun's first attempt rank 1 dies at step 9 (after step 8's save).
    struct DieAtStep9 : lt::Callback {
      std::string name() const override { return "DieAtStep9"; }
      void on_after_optimizer_step(lt::Trainer& trainer, lt::LightningModule&) override {
        if (trainer.global_step() == 9 && trainer.strategy().global_rank() == 1 &&
            env_str("TORCHELASTIC_RESTART_COUNT") == "0") {
          ::raise(SIGKILL);
        }
      }
    };
    options.callbacks({std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                                  .dirpath(env_str("LT_OUT") + "/ckpt")
                                                                  .every_n_train_steps(2)
                                                                  .save_top_k(-1)),
                       std::make_shared<DieAtStep9>()});
  }
  // LT_FAIL=alike: every rank fails with the same input error at the train
  // start; own: with its own message. Reported as a program does
  // (lt::report_failure), exit 2.
  const std::string fail = env_str("LT_FAIL");
  if (fail == "killed") {
    // Each rank prints a line per batch to its stdout (no flush); rank 1 is killed at its second batch.
    auto printing = std::make_shared<lt::LambdaCallback>();
    printing->on_train_batch_end_fn = [](lt::Trainer& trainer, lt::LightningModule&, const torch::Tensor&,
                                         const lt::Batch&, int64_t batch_idx) {
      std::cout << "rank " << trainer.strategy().global_rank() << " trained batch " << batch_idx << "\n";
      if (trainer.strategy().global_rank() == 1 && batch_idx == 1) ::raise(SIGKILL);
    };
    options.callbacks({printing});
  } else if (!fail.empty()) {
    auto failing = std::make_shared<lt::LambdaCallback>();
    failing->on_train_start_fn = [fail](lt::Trainer& trainer, lt::LightningModule&) {
      LT_CHECK_VALUE(fail != "alike", "every rank fails alike");
      LT_CHECK_VALUE(false, "rank ", trainer.strategy().global_rank(), " fails its own way");
    };
    options.callbacks({failing});
  }
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                                 lt::DataLoaderOptions(4).shuffle(true).seed(3));
  if (env_str("LT_FABRIC") == "1") {
    // The same training as a plain loop on lt::Fabric, launched the same way.
    lt::Fabric fabric;
    fabric.launch([&](lt::Fabric& f) {
      auto optimizer = f.setup(net).optimizer;  // SmallNet::configure_optimizers
      f.setup_dataloader(*loader);              // the rank's shard, as the Trainer's
      auto step = [&] {
        optimizer->step();
        optimizer->zero_grad();
      };
      while (f.current_epoch() < 2) {
        for (lt::Batch& batch : f.join(*loader, step)) f.backward(net->training_step(batch, 0));
      }
    });
    LT_WORKER_CHECK(fabric.strategy().name() == "ddp" && fabric.world_size() == 2, "strategy ",
                    fabric.strategy().name(), " of ", fabric.world_size());
    std::vector<torch::Tensor> params;
    for (const auto& p : net->parameters()) params.push_back(p.detach().clone());
    torch::save(params, env_str("LT_OUT") + "/rank" + std::to_string(fabric.global_rank()) + ".pt");
    return 0;
  }
  lt::Trainer trainer(options);
  try {
    trainer.fit(net, loader);  // a spawn's supervisor launches, waits and exits here
  } catch (const lt::ValueError& e) {
    if (fail.empty()) throw;
    lt::report_failure(std::cerr, e.what());
    return 2;
  }
  LT_WORKER_CHECK(trainer.strategy().name() == "ddp", "strategy ", trainer.strategy().name());
  LT_WORKER_CHECK(trainer.strategy().world_size() == 2, "world size ", trainer.strategy().world_size());
  std::vector<torch::Tensor> params;
  for (const auto& p : net->parameters()) params.push_back(p.detach().clone());
  torch::save(params, env_str("LT_OUT") + "/rank" + std::to_string(trainer.strategy().global_rank()) + ".pt");
  return 0;
}

TEST_F(Torchrun, OneNodeOfTwoRanksWithTheAgentsStore) {
  const std::string dir = fresh_dir("static");
  std::string why;
  const std::string port = std::to_string(lt::find_free_port());
  const auto command = torchrun({"--nproc_per_node", "2", "--master_port", port, "--log_dir", dir + "/logs"});
  ASSERT_TRUE(run_launchers(dir, {command}, {}, &why)) << why;
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

// Fabric joins torchrun's ranks as the Trainer does, and its plain loop ends
// with the Trainer's weights bitwise.
TEST_F(Torchrun, AFabricLoopJoinsTorchrunsRanksAndEndsWithTheTrainersWeights) {
  const std::string dir = fresh_dir("fabric");
  std::string why;
  ASSERT_TRUE(run_launchers(dir, {torchrun({"--standalone", "--nproc_per_node", "2", "--log_dir", dir + "/logs"})},
                            {{"LT_FABRIC", "1"}}, &why))
      << why;
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}

// torchrun --max_restarts 1: a worker killed mid-epoch makes torchrun
// restart the group; the restarted workers resume from the newest checkpoint
// (step 8, mid-epoch) by themselves and end with the never-killed weights.
TEST_F(Torchrun, ARestartedGroupResumesFromTheLastCheckpoint) {
  const std::string dir = fresh_dir("elastic");
  std::string why;
  ASSERT_TRUE(run_launchers(dir, {torchrun({"--standalone", "--nproc_per_node", "2", "--max_restarts", "1",
                                            "--log_dir", dir + "/logs"})},
                            {{"LT_MODE", "elastic"}}, &why))
      << why;
  const std::string log = read_file(dir + "/launcher0.log");
  EXPECT_NE(log.find("epoch=1-step=8.ckpt (ckpt_path: last, after a restart by torchrun)"), std::string::npos) << log;
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}
