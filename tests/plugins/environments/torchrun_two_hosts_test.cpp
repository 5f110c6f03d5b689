// plugins/environments/torchrun.h across two hosts made of network
// namespaces joined by a veth pair: torchrun elastic (a node lost, a node
// joining: every sample trained once per epoch, the TorchrunElastic worker),
// static rendezvous, fsdp HYBRID_SHARD against ddp, and Lightning's manual
// multi-node. The oracle: the local spawn's weights (torchrun_fixture.h), and
// the 23 samples of each epoch.
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

// torchrun elastic (--nnodes 1:2, the c10d rendezvous): sample i of 23 is
// the number i; each rank records "epoch step sample" of what it trains to
// LT_OUT/samples.<restart>.<rank>; a checkpoint after every step. On the node
// started with LT_DOOMED=1, in torchrun's first attempt, the worker kills its
// agent and itself in step 3 (a node lost for good).
LT_TEST_WORKER(TorchrunElastic) {
  struct CountingNet : lt::LightningModule {
    CountingNet() { fc = register_module("fc", torch::nn::Linear(1, 1)); }
    torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
      {
        std::ofstream out(env_str("LT_OUT") + "/samples." + env_str("TORCHELASTIC_RESTART_COUNT") + "." +
                              env_str("WORLD_SIZE") + "." + std::to_string(global_rank()),
                          std::ios::app);
        for (int64_t i = 0; i < batch.data.size(0); ++i) {
          out << current_epoch() << " " << global_step() + 1 << " " << batch.data[i][0].item<int64_t>() << "\n";
        }
      }
      if (env_str("LT_DOOMED") == "1" && env_str("TORCHELASTIC_RESTART_COUNT") == "0" && global_step() + 1 == 3) {
        ::kill(::getppid(), SIGKILL);  // the node's agent
        ::raise(SIGKILL);
      }
      // Alone in the first attempt, in step LT_WAIT_ALONE: waits for the restart torchrun makes when
      // the other node joins (its SIGTERM), 60 s at most.
      if (env_str("WORLD_SIZE") == "1" && env_str("TORCHELASTIC_RESTART_COUNT") == "0" &&
          global_step() + 1 == env_int("LT_WAIT_ALONE", -1)) {
        for (int i = 0; i < 1200 && lt::interrupt_signal() == 0; ++i) ::usleep(50000);
      }
      return torch::mse_loss(fc(batch.data / 23), batch.target);
    }
    lt::OptimizerConfig configure_optimizers() override {
      return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
    }
    torch::nn::Linear fc{nullptr};
  };
  const torch::Tensor x = torch::arange(23, torch::kFloat).unsqueeze(1);
  auto loader = std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, torch::zeros_like(x)),
                                                 lt::DataLoaderOptions(2).shuffle(true).seed(7));
  lt::Trainer trainer(lt::TrainerOptions()
                          .max_epochs(2)
                          .enable_progress_bar(false)
                          .enable_model_summary(false)
                          .default_root_dir(env_str("LT_OUT"))
                          .callbacks({std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                                                .dirpath(env_str("LT_OUT") + "/ckpt")
                                                                                .every_n_train_steps(1)
                                                                                .save_top_k(-1))}));
  trainer.fit(std::make_shared<CountingNet>(), loader);
  return 0;
}

namespace {

// Two test hosts: network namespaces joined by a veth pair, 10.77.<n>.1 and
// 10.77.<n>.2; torn down when destroyed. Empty `error` when they are up.
// Each host's /etc/hosts (ip netns exec's /etc/netns/<host>/hosts) names
// both, for elastic(): torchrun's c10d rendezvous gives the workers their
// rank 0's host by name.
class TwoHosts {
 public:
  TwoHosts() {
    const std::string id = std::to_string(::getpid() % 100000);
    a_ = "lt_a" + id;
    b_ = "lt_b" + id;
    const std::string net = "10.77." + std::to_string(::getpid() % 250) + ".";
    address_a_ = net + "1";
    for (const std::string& command :
         {"ip netns add " + a_, "ip netns add " + b_, "ip link add lt_va" + id + " type veth peer name lt_vb" + id,
          "ip link set lt_va" + id + " netns " + a_, "ip link set lt_vb" + id + " netns " + b_,
          "ip -n " + a_ + " addr add " + net + "1/24 dev lt_va" + id,
          "ip -n " + b_ + " addr add " + net + "2/24 dev lt_vb" + id, "ip -n " + a_ + " link set lt_va" + id + " up",
          "ip -n " + b_ + " link set lt_vb" + id + " up", "ip -n " + a_ + " link set lo up",
          "ip -n " + b_ + " link set lo up"}) {
      if (std::system((command + " 2>/dev/null").c_str()) != 0) {
        error = "'" + command + "' failed (needs root and iproute2)";
        return;
      }
    }
    for (const std::string& host : {a_, b_}) {
      std::error_code ec;
      std::filesystem::create_directories("/etc/netns/" + host, ec);
      std::ofstream hosts("/etc/netns/" + host + "/hosts");
      hosts << "127.0.0.1 localhost\n" << net << "1 " << name(0) << "\n" << net << "2 " << name(1) << "\n";
      if (ec || !hosts) error = "cannot write /etc/netns/" + host + "/hosts";
    }
  }
  ~TwoHosts() {
    for (const std::string& host : {a_, b_}) {
      std::system(("ip netns del " + host + " 2>/dev/null").c_str());
      std::error_code ec;
      std::filesystem::remove_all("/etc/netns/" + host, ec);
    }
  }
  // Host 0's (a) or 1's (b) name, as elastic() sets it.
  std::string name(int host) const { return (host == 0 ? "lt-a" : "lt-b") + a_.substr(4); }
  // `command` run on host 0 or 1 under that host's own name (a UTS namespace).
  std::vector<std::string> elastic(int host, std::vector<std::string> command) const {
    command.insert(command.begin(), {"unshare", "--uts", "/bin/sh", "-c", "hostname " + name(host) + " && exec \"$@\"",
                                     "sh"});
    return on(host, std::move(command));
  }
  // `command` run on host 0 (a) or 1 (b).
  std::vector<std::string> on(int host, std::vector<std::string> command) const {
    command.insert(command.begin(), {"/usr/sbin/ip", "netns", "exec", host == 0 ? a_ : b_});
    return command;
  }
  const std::string& address_a() const { return address_a_; }
  // torchrun on both hosts, a node of `nproc_per_node` ranks each, static rendezvous at host 0's
  // `port`; node n's logs under dir/logsN.
  std::vector<std::vector<std::string>> torchrun_nodes(const std::string& dir, int nproc_per_node,
                                                       int port) const {
    std::vector<std::vector<std::string>> nodes;
    for (int node = 0; node < 2; ++node) {
      nodes.push_back(on(node, torchrun({"--nnodes", "2", "--node_rank", std::to_string(node), "--nproc_per_node",
                                         std::to_string(nproc_per_node), "--master_addr", address_a_,
                                         "--master_port", std::to_string(port), "--log_dir",
                                         dir + "/logs" + std::to_string(node)})));
    }
    return nodes;
  }
  std::string error;

 private:
  std::string a_, b_, address_a_;
};

// torchrun elastic on `hosts`: a node of one rank (--nnodes 1:2, c10d
// rendezvous hosted by host 0 at `port`, --max_restarts 1).
std::vector<std::string> elastic_node(const TwoHosts& hosts, int host, int port, const std::string& dir) {
  return hosts.elastic(host, torchrun({"--nnodes", "1:2", "--nproc_per_node", "1", "--max_restarts", "1",
                                       "--monitor_interval", "1", "--rdzv_backend", "c10d", "--rdzv_endpoint",
                                       hosts.address_a() + ":" + std::to_string(port), "--rdzv_id", "lt_elastic",
                                       "--rdzv_conf", std::string("is_host=") + (host == 0 ? "true" : "false") +
                                                          ",last_call_timeout=3",
                                       "--log_dir", dir + "/logs" + std::to_string(host)}));
}

// The samples TorchrunElastic's rounds trained (samples.RESTART.WORLD.RANK
// files), by epoch: of each round only the steps up to the step the next
// round resumed from (one before its first; a round ended by a node's loss
// or arrival trained some after its last checkpoint).
std::map<int64_t, std::vector<int64_t>> trained_by_rounds(const std::string& dir) {
  struct Line {
    int64_t epoch, step, sample;
  };
  std::map<std::string, std::vector<Line>> rounds;
  for (const auto& entry : std::filesystem::directory_iterator(dir)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("samples.", 0) != 0) continue;
    std::ifstream in(entry.path());
    Line line{};
    while (in >> line.epoch >> line.step >> line.sample) rounds[name.substr(0, name.rfind('.'))].push_back(line);
  }
  // By first step; rounds that start at the same step in name order (RESTART.WORLD: a node alone, then
  // the group it joined, which started anew).
  std::vector<std::pair<int64_t, const std::vector<Line>*>> by_start;  // (first step, lines)
  for (const auto& [round, lines] : rounds) {
    int64_t first = INT64_MAX;
    for (const Line& line : lines) first = std::min(first, line.step);
    by_start.emplace_back(first, &lines);
  }
  std::stable_sort(by_start.begin(), by_start.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
  std::map<int64_t, std::vector<int64_t>> out;
  for (size_t r = 0; r < by_start.size(); ++r) {
    const int64_t last = r + 1 < by_start.size() ? by_start[r + 1].first - 1 : INT64_MAX;
    for (const Line& line : *by_start[r].second) {
      if (line.step <= last) out[line.epoch].push_back(line.sample);
    }
  }
  return out;
}

void expect_every_sample_once(const std::map<int64_t, std::vector<int64_t>>& trained, const std::string& why) {
  std::vector<int64_t> all(23);
  for (int64_t i = 0; i < 23; ++i) all[static_cast<size_t>(i)] = i;
  ASSERT_EQ(trained.size(), 2u) << why;
  for (auto [epoch, samples] : trained) {
    std::sort(samples.begin(), samples.end());
    EXPECT_EQ(samples, all) << "epoch " << epoch << "\n" << why;
  }
}

}  // namespace

// torchrun elastic on two hosts: two nodes (--nnodes 1:2, c10d rendezvous,
// --max_restarts 1) train 2 epochs of 23 samples; host b is lost for good in
// step 3 (its agent and worker SIGKILLed); host a's agent re-forms the group
// alone and its restarted worker resumes from the newest checkpoint (step 2)
// on 1 rank, dealing out what is left of the epoch (data/epoch_samples.h).
// Each epoch's samples that the checkpoints carried on are the 23, once.
TEST_F(Torchrun, AGroupThatLosesANodeGoesOnWithTheOtherEverySampleOnce) {
  TwoHosts hosts;
  if (!hosts.error.empty()) GTEST_SKIP() << "cannot make two test hosts: " << hosts.error;
  const std::string dir = fresh_dir("lost_node");
  // The doomed host in the background (its failure would end a launch_and_wait), host a waited for.
  std::string doomed = "env LT_TEST_WORKER=TorchrunElastic LT_OUT=" + dir + " LT_DOOMED=1";
  for (const std::string& arg : elastic_node(hosts, 1, 29523, dir)) {
    std::string quoted = "'";
    for (char c : arg) quoted += c == '\'' ? std::string("'\\''") : std::string(1, c);
    doomed += " " + quoted + "'";
  }
  ASSERT_EQ(std::system((doomed + " > " + dir + "/launcher1.log 2>&1 &").c_str()), 0);
  lt::WorkerSpec host;
  host.argv = elastic_node(hosts, 0, 29523, dir);
  // Should host b register after torchrun's last call, host a waits alone in step 1 for it.
  host.env = {{"LT_TEST_WORKER", "TorchrunElastic"}, {"LT_OUT", dir}, {"LT_WAIT_ALONE", "1"}};
  host.output_path = dir + "/launcher0.log";
  const auto exits = lt::launch_and_wait({host}, lt::LaunchOptions{std::chrono::seconds(120)});
  const std::string logs = read_file(host.output_path) + "\nhost b:\n" + read_file(dir + "/launcher1.log");
  ASSERT_TRUE(exits[0].ok()) << exits[0].describe() << "\n" << logs;
  expect_every_sample_once(trained_by_rounds(dir), logs);
  EXPECT_NE(logs.find("resumed on 1 rank from a checkpoint of 2 ranks"), std::string::npos) << logs;
  std::filesystem::remove_all(dir);
}

// torchrun elastic on two hosts: host a trains alone (--nnodes 1:2); after
// its checkpoint of step 2, host b's agent joins (host a's worker waits in
// step 3 for it): torchrun restarts host a's worker (a membership change,
// not counted as a restart) and starts host b's, and the two resume from
// the newest checkpoint by themselves
// (torchrun_restarted: host a's agent had started a worker before), dealing
// out the rest of the epoch to 2 ranks. Each epoch's samples that the
// checkpoints carried on are the 23, once.
TEST_F(Torchrun, AGroupThatANodeJoinsGoesOnWithBothEverySampleOnce) {
  TwoHosts hosts;
  if (!hosts.error.empty()) GTEST_SKIP() << "cannot make two test hosts: " << hosts.error;
  const std::string dir = fresh_dir("joined_node");
  std::vector<lt::WorkerSpec> nodes(2);
  for (int host = 0; host < 2; ++host) {
    nodes[host].argv = elastic_node(hosts, host, 29525, dir);
    nodes[host].env = {{"LT_TEST_WORKER", "TorchrunElastic"}, {"LT_OUT", dir}, {"LT_WAIT_ALONE", "3"}};
#if TORCH_VERSION_MAJOR >= 2
    // torchrun 2.x's agents share one store with the workers and keep the
    // first round's master address: a node that joins later waits for a
    // MASTER_ADDR no agent writes, and the round times out on both (seen with
    // 2.11). Without the shared store every round publishes its own
    // (docs/reliability.md says so to users).
    nodes[host].env["TORCH_DISABLE_SHARE_RDZV_TCP_STORE"] = "1";
#endif
    nodes[host].output_path = dir + "/launcher" + std::to_string(host) + ".log";
  }
  // Host b starts once host a has a checkpoint.
  const std::string first = dir + "/ckpt/epoch=0-step=2.ckpt";
  nodes[1].argv.insert(nodes[1].argv.begin(), {"/bin/sh", "-c", "while [ ! -e '" + first + "' ]; do sleep 0.1; done; "
                                                                "exec \"$@\"", "sh"});
  const auto exits = lt::launch_and_wait(nodes, lt::LaunchOptions{std::chrono::seconds(120)});
  const std::string logs = read_file(nodes[0].output_path) + "\nhost b:\n" + read_file(nodes[1].output_path);
  ASSERT_TRUE(exits[0].ok() && exits[1].ok()) << exits[0].describe() << "; " << exits[1].describe() << "\n" << logs;
  expect_every_sample_once(trained_by_rounds(dir), logs);
  EXPECT_NE(logs.find("resumed on 2 ranks from a checkpoint of 1 rank"), std::string::npos) << logs;
  EXPECT_NE(logs.find("(ckpt_path: last, after a restart by torchrun)"), std::string::npos) << logs;
  std::filesystem::remove_all(dir);
}

TEST_F(Torchrun, TwoHostsInNetworkNamespaces) {
  TwoHosts hosts;
  if (!hosts.error.empty()) GTEST_SKIP() << "cannot make two test hosts: " << hosts.error;
  const std::string dir = fresh_dir("hosts");
  std::string why;
  ASSERT_TRUE(run_launchers(dir, hosts.torchrun_nodes(dir, 1, 29517), {}, &why)) << why;
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}

// fsdp HYBRID_SHARD across two hosts of two ranks each (torchrun, static
// rendezvous): sharded within a host, replicated across; with uneven data per
// rank it ends with ddp's weights (1e-6) and every rank the same.
TEST_F(Torchrun, HybridShardAcrossTwoHostsEqualsDdp) {
  TwoHosts hosts;
  if (!hosts.error.empty()) GTEST_SKIP() << "cannot make two test hosts: " << hosts.error;
  const std::string dir = fresh_dir("hybrid");
  std::string why;
  ASSERT_TRUE(run_launchers(dir, hosts.torchrun_nodes(dir, 2, 29521), {{"LT_MODE", "hybrid"}}, &why)) << why;
  const auto first = load_params(dir + "/rank0.pt");
  ASSERT_EQ(first.size(), 2u);
  for (int rank = 1; rank < 4; ++rank) {
    const auto got = load_params(dir + "/rank" + std::to_string(rank) + ".pt");
    ASSERT_EQ(got.size(), 2u);
    EXPECT_TRUE(got[0].equal(first[0])) << "rank " << rank << "'s HYBRID_SHARD weights differ from rank 0's";
  }
  std::filesystem::remove_all(dir);
}

// Lightning's manual multi-node: the same command on each host with
// MASTER_ADDR, MASTER_PORT and NODE_RANK; each node spawns its own worker.
TEST_F(Torchrun, ManualMultiNodeOnTwoHosts) {
  TwoHosts hosts;
  if (!hosts.error.empty()) GTEST_SKIP() << "cannot make two test hosts: " << hosts.error;
  const std::string dir = fresh_dir("manual");
  std::vector<std::vector<std::string>> nodes;
  for (int node = 0; node < 2; ++node) {
    nodes.push_back(hosts.on(node, {"/usr/bin/env", "NODE_RANK=" + std::to_string(node), lt::self_executable()}));
  }
  std::string why;
  ASSERT_TRUE(run_launchers(dir, nodes, {{"LT_MODE", "manual"}, {"MASTER_ADDR", hosts.address_a()},
                                         {"MASTER_PORT", "29519"}},
                            &why))
      << why;
  EXPECT_NE(read_file(dir + "/launcher1.log").find("node 1 of 2: launching 1 worker process ("), std::string::npos)
      << read_file(dir + "/launcher1.log");
  expect_reference_weights(dir);
  std::filesystem::remove_all(dir);
}
