// The fsdp strategy: sharded gradients and optimizer state under lockstep
// Join, against the Python oracle's window rule (tests/fixtures/join_lockstep.txt:
// PyTorch's own FSDP has no Join and its ZeroRedundancyOptimizer under Join
// steps stale shards, so the oracle is the single-optimizer window rule) and
// against the ddp strategy. Real worker processes, gloo on 127.0.0.1.

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <filesystem>
#include <iostream>
#include <map>
#include <string>

#include <lightning_cpp/lightning.h>

#include "distributed/join_oracle.h"
#include "support/multiprocess.h"

using namespace lt::testing;  // env_int, the Join oracle's model, data and fixtures

namespace {

// One per worker process each: a process group lives as long as its strategy.
std::shared_ptr<lt::FSDPStrategy> fsdp() {
  static auto strategy = std::make_shared<lt::FSDPStrategy>(
      lt::FSDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  return strategy;
}

std::shared_ptr<lt::DDPStrategy> ddp() {
  static auto strategy = std::make_shared<lt::DDPStrategy>(
      lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  return strategy;
}

lt::TrainerOptions options(const std::shared_ptr<lt::Strategy>& strategy, int ws) {
  return lt::TrainerOptions()
      .strategy(strategy)
      .devices(ws)
      .enable_progress_bar(false)
      .enable_model_summary(false)
      .default_logger(false)
      .default_root_dir(std::filesystem::temp_directory_path().string());
}

// The optimizer state a checkpoint holds, loaded into a fresh JoinNet's
// optimizer: every state tensor, flattened and concatenated in parameter order.
torch::Tensor optimizer_state_of(const std::string& path, const std::string& optim) {
  auto model = std::make_shared<JoinNet>();
  model->optim = optim;
  auto optimizer = model->configure_optimizers().optimizer;
  lt::load_optimizer_state_dict(*optimizer, lt::pickle_load_file(path).toGenericDict().at("optimizer"), path);
  std::vector<torch::Tensor> out;
  for (const auto& p : model->parameters()) {
    auto it = optimizer->state().find(lt::optimizer_state_key(p));
    if (it == optimizer->state().end()) continue;
    if (auto* adam = dynamic_cast<torch::optim::AdamParamState*>(it->second.get())) {
      out.push_back(adam->exp_avg().reshape(-1));
      out.push_back(adam->exp_avg_sq().reshape(-1));
      out.push_back(torch::tensor({static_cast<double>(adam->step())}, torch::kDouble));
    } else if (auto* sgd = dynamic_cast<torch::optim::SGDParamState*>(it->second.get())) {
      out.push_back(sgd->momentum_buffer().reshape(-1));
    }
  }
  return out.empty() ? torch::zeros({0}, torch::kDouble) : torch::cat(out);
}

// Saves the run's checkpoint at the end of fit (every rank: it is a collective under fsdp).
std::shared_ptr<lt::Callback> save_at_end(const std::string& path) {
  auto callback = std::make_shared<lt::LambdaCallback>();
  callback->on_train_end_fn = [path](lt::Trainer& trainer, lt::LightningModule&) { trainer.save_checkpoint(path); };
  return callback;
}

// JoinNet with a validation step whose forward runs the units (the ranks validate different numbers of batches).
class ValidatedJoinNet : public JoinNet {
 public:
  using JoinNet::JoinNet;
  bool has_validation_step() const override { return true; }
  void validation_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    ++validated;
    log("val_loss", torch::mse_loss(forward(batch.data), batch.target));
  }
  int64_t validated = 0;
};

}  // namespace

// How a row is sharded: the strategy, and for FULL_SHARD where the units come from.
struct Sharding {
  lt::ShardingStrategy strategy;
  bool declared_units = false;  // JoinNet's Linears as lt::FSDPUnit
  int64_t min_num_params = 0;   // the size policy (5: each Linear a unit)
  std::string name() const {
    return lt::OptionCodec<lt::ShardingStrategy>::show(strategy) + (declared_units ? " (declared units)" : "") +
           (min_num_params > 0 ? " (policy units)" : "");
  }
};

// Every lockstep row of the fixture for this world size under SHARD_GRAD_OP,
// FULL_SHARD with declared units (NO_SHARD too for the SGD rows, FULL_SHARD
// with policy units for the momentum and Adam rows): the oracle's weights
// within 1e-6, the same on every rank; the Adam and momentum rows' optimizer
// state, consolidated from checkpoints, equals ddp's within 1e-6.
LT_TEST_WORKER(FsdpLockstepMatrix) {
  const int rank = env_int("RANK");
  const int ws = env_int("WORLD_SIZE");
  const bool nodes = env_int("LOCAL_WORLD_SIZE") < ws;
  const std::string dir = env_str("LT_CKPT_DIR");
  int checked = 0, states = 0, hybrid = 0;
  for (const LockstepConfig& c : read_lockstep()) {
    if (c.ws != ws || c.mode != "lockstep") continue;
    const bool compare_state = c.optim != "sgd" && c.epochs == 3 && c.divide;
    std::vector<Sharding> shardings{{lt::ShardingStrategy::kShardGradOp},
                                    {lt::ShardingStrategy::kFullShard, /*declared_units=*/true}};
    // Ranks on nodes (4 ranks: 2 nodes of 2): HYBRID_SHARD, declared and policy units, in place of FULL_SHARD's policy units.
    const auto policy = nodes ? lt::ShardingStrategy::kHybridShard : lt::ShardingStrategy::kFullShard;
    if (c.optim == "sgd") shardings.push_back({lt::ShardingStrategy::kNoShard});
    if (c.optim == "sgd" && nodes) shardings.push_back({lt::ShardingStrategy::kHybridShard, /*declared_units=*/true});
    if (c.optim != "sgd") shardings.push_back({policy, false, /*min_num_params=*/5});
    std::vector<std::string> saved;
    for (const Sharding& sharding : shardings) {
      fsdp()
          ->options()
          .sharding_strategy(sharding.strategy)
          .auto_wrap_min_num_params(sharding.min_num_params)
          .join_divide_by_initial_world_size(c.divide)
          // HYBRID_SHARD's checkpoints sharded: the first node's ranks write the files.
          .state_dict_type(sharding.strategy == lt::ShardingStrategy::kHybridShard ? lt::StateDictType::kSharded
                                                                                    : lt::StateDictType::kFull);
      auto model = std::make_shared<JoinNet>(sharding.declared_units);
      model->optim = c.optim;
      auto run_options = options(fsdp(), ws).max_epochs(c.epochs).accumulate_grad_batches(c.k);
      if (compare_state && sharding.strategy != lt::ShardingStrategy::kNoShard) {
        saved.push_back(dir + "/fsdp" + std::to_string(saved.size()) + ".ckpt");
        run_options.callbacks({save_at_end(saved.back())});
      }
      lt::Trainer trainer(run_options);
      trainer.fit(model, rank_loader(rank, c.counts[rank]));
      const torch::Tensor params = model->flat();
      const torch::Tensor all = fsdp()->all_gather(params);
      const double error = (params - torch::tensor(c.params, torch::kDouble)).abs().max().item<double>();
      const double spread = (all - all[0]).abs().max().item<double>();
      LT_WORKER_CHECK(error <= 1e-6 && spread == 0.0, c.describe(), " ", sharding.name(), ": error=", error,
                      " spread across ranks=", spread);
      ++checked;
      hybrid += sharding.strategy == lt::ShardingStrategy::kHybridShard;
    }
    if (!compare_state) continue;
    ddp()->options().join_divide_by_initial_world_size(c.divide);
    auto model = std::make_shared<JoinNet>();
    model->optim = c.optim;
    lt::Trainer trainer(options(ddp(), ws)
                            .max_epochs(c.epochs)
                            .accumulate_grad_batches(c.k)
                            .callbacks({save_at_end(dir + "/ddp.ckpt")}));
    trainer.fit(model, rank_loader(rank, c.counts[rank]));
    const torch::Tensor whole = optimizer_state_of(dir + "/ddp.ckpt", c.optim);
    for (const std::string& path : saved) {
      const torch::Tensor sharded = optimizer_state_of(path, c.optim);
      LT_WORKER_CHECK(sharded.numel() == whole.numel() && sharded.numel() > 0, c.describe(), ": optimizer state of ",
                      sharded.numel(), " values in ", path, ", ", whole.numel(), " under ddp");
      const double differ = (sharded - whole).abs().max().item<double>();
      LT_WORKER_CHECK(differ <= 1e-6, c.describe(), ": the consolidated optimizer state of ", path,
                      " differs from ddp's by ", differ);
      ++states;
    }
  }
  fsdp()
      ->options()
      .sharding_strategy(lt::ShardingStrategy::kShardGradOp)
      .auto_wrap_min_num_params(0)
      .join_divide_by_initial_world_size(true)
      .state_dict_type(lt::StateDictType::kFull);
  ddp()->options().join_divide_by_initial_world_size(true);
  std::cerr << "rank " << rank << ": " << checked << " runs match the oracle (" << hybrid << " HYBRID_SHARD), "
            << states << " optimizer states ddp's" << std::endl;
  LT_WORKER_CHECK(checked > 0 && states > 0 && (hybrid > 0) == nodes, "nothing checked for world size ", ws);
  return 0;
}

namespace {
// Each rank's torchrun variables on nodes of `local` ranks.
std::vector<std::map<std::string, std::string>> on_nodes(int ranks, int local) {
  std::vector<std::map<std::string, std::string>> env;
  for (int r = 0; r < ranks; ++r) {
    env.push_back({{"LOCAL_RANK", std::to_string(r % local)},
                   {"LOCAL_WORLD_SIZE", std::to_string(local)},
                   {"GROUP_RANK", std::to_string(r / local)}});
  }
  return env;
}

// Four ranks are 2 nodes of 2 (HYBRID_SHARD's rows).
void expect_matrix(int ranks) {
  const auto dir = std::filesystem::temp_directory_path() /
                   ("lt_fsdp_matrix_" + std::to_string(::getpid()) + "_" + std::to_string(ranks));
  std::filesystem::create_directories(dir);
  WorkerOptions options;
  options.timeout = std::chrono::seconds(240);
  options.env = {{"LT_CKPT_DIR", dir.string()}};
  if (ranks == 4) options.rank_env = on_nodes(ranks, 2);
  const WorkersResult result = run_workers("FsdpLockstepMatrix", ranks, options);
  EXPECT_TRUE(result.ok()) << result.summary();
  std::filesystem::remove_all(dir);
}
}  // namespace

TEST(FsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleAndDdpOnTwoRanks) { expect_matrix(2); }
TEST(FsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleAndDdpOnThreeRanks) { expect_matrix(3); }
TEST(FsdpJoin, EveryShardingOnTheLockstepMatrixEqualsTheOracleAndDdpOnFourRanksOnTwoNodes) { expect_matrix(4); }

// Full checkpoints of a sharded run: counts 5 and 8, accumulation 2, Adam, a
// global-norm clip, 2 epochs, a mid-epoch checkpoint at step 6, under
// SHARD_GRAD_OP and under FULL_SHARD with declared units (validating every 3
// batches, on 1 and 2 batches: the ranks evaluate different numbers). Resumed
// under its sharding it ends as the uninterrupted run bitwise; under ddp
// within 1e-6.
LT_TEST_WORKER(FsdpCheckpoints) {
  const int rank = env_int("RANK");
  const std::string dir = env_str("LT_CKPT_DIR");
  for (const bool full_shard : {false, true}) {
    const std::string run_dir = dir + (full_shard ? "/full" : "/grad_op");
    fsdp()->options().sharding_strategy(full_shard ? lt::ShardingStrategy::kFullShard
                                                   : lt::ShardingStrategy::kShardGradOp);
    auto run = [&](const std::shared_ptr<lt::Strategy>& strategy, const std::string& ckpt_path, bool save) {
      auto model = std::make_shared<ValidatedJoinNet>(full_shard);
      model->optim = "adam";
      auto run_options = options(strategy, 2).max_epochs(2).accumulate_grad_batches(2).gradient_clip_val(0.05);
      if (full_shard) run_options.val_check_interval(3).num_sanity_val_steps(0);
      if (save) {
        run_options.callbacks({std::make_shared<lt::ModelCheckpoint>(
            lt::ModelCheckpointOptions().dirpath(run_dir).every_n_train_steps(6).save_top_k(-1))});
      }
      lt::Trainer trainer(run_options);
      trainer.fit(model, rank_loader(rank, rank == 0 ? 5 : 8), full_shard ? rank_loader(rank, 1 + rank) : nullptr,
                  ckpt_path);
      LT_WORKER_CHECK(!full_shard || model->validated > 0, "FULL_SHARD: no validation ran");
      return model->flat();
    };
    const torch::Tensor straight = run(fsdp(), "", /*save=*/true);
    const std::string ckpt = run_dir + "/epoch=1-step=6.ckpt";
    const torch::Tensor resumed = run(fsdp(), ckpt, /*save=*/false);
    LT_WORKER_CHECK(resumed.equal(straight), (full_shard ? "FULL_SHARD" : "SHARD_GRAD_OP"),
                    " resumed from its mid-epoch checkpoint differs by ", (resumed - straight).abs().max().item<double>());
    const torch::Tensor under_ddp = run(ddp(), ckpt, /*save=*/false);
    const double differ = (under_ddp - straight).abs().max().item<double>();
    LT_WORKER_CHECK(differ <= 1e-6, "ddp resumed from ", (full_shard ? "FULL_SHARD" : "SHARD_GRAD_OP"),
                    "'s checkpoint differs by ", differ);
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpCheckpoint, AMidEpochCheckpointResumesExactlyUnderShardGradOpAndFullShardAndUnderDdp) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_fsdp_ckpt_" + std::to_string(::getpid()));
  expect_workers_pass("FsdpCheckpoints", 2, std::chrono::seconds(90), {{"LT_CKPT_DIR", dir.string()}});
  std::filesystem::remove_all(dir);
}

// A full checkpoint of a FULL_SHARD run is written streamed and is ddp's:
// counts 3 and 5 (rank 0 joins after step 3), Adam, checkpoints at steps 2
// and 4. In the dict the hooks see, the freed units' parameters and the
// optimizer's state are placeholders (no rank held them whole); Python's
// torch.load reads both files, and they have ddp's keys and values (1e-6).
LT_TEST_WORKER(FsdpStreamedFullCheckpoint) {
  const int rank = env_int("RANK");
  const std::string dir = env_str("LT_CKPT_DIR");
  for (const bool sharded : {true, false}) {
    int64_t placeholders = 0, tensors = 0;
    auto count = std::make_shared<lt::LambdaCallback>();
    count->on_save_checkpoint_fn = [&](lt::Trainer&, lt::LightningModule&, lt::StateDict& ckpt) {
      for (const auto& item : ckpt.at("state_dict").toGenericDict()) {
        ++tensors;
        placeholders += lt::is_deferred(item.value().toTensor());
      }
      for (const auto& state : ckpt.at("optimizer").toGenericDict().at("state").toGenericDict()) {
        for (const auto& item : state.value().toGenericDict()) {
          if (!item.value().isTensor() || item.value().toTensor().dim() == 0) continue;  // "step"
          ++tensors;
          placeholders += lt::is_deferred(item.value().toTensor());
        }
      }
    };
    fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
    auto model = std::make_shared<JoinNet>(/*units=*/sharded);
    model->optim = "adam";
    auto checkpoints = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                                 .dirpath(dir + (sharded ? "/fsdp" : "/ddp"))
                                                                 .every_n_train_steps(2)
                                                                 .save_top_k(-1));
    lt::Trainer trainer(options(sharded ? std::static_pointer_cast<lt::Strategy>(fsdp()) : ddp(), 2)
                            .max_epochs(1)
                            .callbacks({count, checkpoints}));
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    // 2 checkpoints of 4 parameters and 8 Adam tensors: under FULL_SHARD every one a placeholder.
    LT_WORKER_CHECK(tensors == 24 && placeholders == (sharded ? 24 : 0), (sharded ? "fsdp" : "ddp"), ": ",
                    placeholders, " placeholders among ", tensors, " tensors of the checkpoints' dicts");
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpCheckpoint, AFullShardCheckpointIsWrittenStreamedAndIsDdpsForTorchLoad) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_fsdp_stream_" + std::to_string(::getpid()));
  expect_workers_pass("FsdpStreamedFullCheckpoint", 2, std::chrono::seconds(90), {{"LT_CKPT_DIR", dir.string()}});
  for (const char* name : {"epoch=0-step=2.ckpt", "epoch=0-step=4.ckpt"}) {
    const std::string command = std::string(LT_PYTHON) + " " + LT_SOURCE_DIR +
                                "/tests/python/checkpoint_interop.py same " + (dir / "fsdp" / name).string() + " " +
                                (dir / "ddp" / name).string() + " 1e-6";
    EXPECT_EQ(std::system(command.c_str()), 0) << command;
  }
  std::filesystem::remove_all(dir);
}

namespace {
const char* name_of(lt::ShardingStrategy sharding) {
  return sharding == lt::ShardingStrategy::kFullShard ? "FULL_SHARD" : "SHARD_GRAD_OP";
}
}  // namespace

// A window that every rank pads (1 batch each, accumulate_grad_batches 3:
// the epoch's only window ends past every rank's data), from the first
// step: no rank runs the micro-batch that reduces, so the units' order is
// learnt later; every sharding ends with ddp's weights (1e-6), Adam, 3 epochs.
LT_TEST_WORKER(FsdpEveryRankPads) {
  const int rank = env_int("RANK");
  auto train = [&](const std::shared_ptr<lt::Strategy>& strategy, bool units) {
    auto model = std::make_shared<JoinNet>(units);
    model->optim = "adam";
    lt::Trainer trainer(options(strategy, 2).max_epochs(3).accumulate_grad_batches(3));
    trainer.fit(model, rank_loader(rank, 1 + rank));
    return model->flat();
  };
  const torch::Tensor reference = train(ddp(), false);
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard}) {
    fsdp()->options().sharding_strategy(sharding);
    const torch::Tensor got = train(fsdp(), sharding == lt::ShardingStrategy::kFullShard);
    const double differ = (got - reference).abs().max().item<double>();
    LT_WORKER_CHECK(differ <= 1e-6, name_of(sharding), " differs from ddp by ", differ);
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpJoin, AWindowEveryRankPadsBeforeTheFirstReductionEndsAsDdp) {
  expect_workers_pass("FsdpEveryRankPads", 2, std::chrono::seconds(60));
}

// Sharded checkpoints (state_dict_type sharded). JoinNet on 28 samples
// dealt by the distributed sampler (batches of 2: 7 per rank on 2 ranks),
// Adam, accumulation 2, a global-norm clip, 2 epochs, a checkpoint every 3
// steps (the first mid-epoch), under SHARD_GRAD_OP and FULL_SHARD with
// declared units, written full and written sharded by the same run.
namespace {
std::shared_ptr<lt::DataLoader> sampled_loader() {
  std::vector<torch::Tensor> xs, ys;
  for (int64_t b = 0; b < 14; ++b) {
    auto [x, y] = oracle_batch(b % 2, b);
    xs.push_back(x);
    ys.push_back(y);
  }
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(torch::cat(xs), torch::cat(ys)),
                                          lt::DataLoaderOptions(kBatch));
}

lt::TrainerOptions sampled_options(const std::shared_ptr<lt::Strategy>& strategy, int ws) {
  return options(strategy, ws).max_epochs(2).accumulate_grad_batches(2).gradient_clip_val(0.05);
}

}  // namespace

// Written by 2 ranks: the sharded run's weights are the full run's, and
// resumed from its mid-epoch sharded checkpoint it ends as it did, bitwise.
LT_TEST_WORKER(FsdpShardedCheckpointWrite) {
  const std::string dir = env_str("LT_CKPT_DIR");
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard}) {
    fsdp()->options().sharding_strategy(sharding);
    auto run = [&](lt::StateDictType type, const std::string& ckpt_path) {
      fsdp()->options().state_dict_type(type);
      auto model = std::make_shared<JoinNet>(/*units=*/sharding == lt::ShardingStrategy::kFullShard);
      model->optim = "adam";
      auto run_options = sampled_options(fsdp(), 2);
      if (ckpt_path.empty()) {
        const std::string to = dir + "/" + name_of(sharding) + (type == lt::StateDictType::kSharded ? "/sharded" : "/full");
        run_options.callbacks({std::make_shared<lt::ModelCheckpoint>(
            lt::ModelCheckpointOptions().dirpath(to).every_n_train_steps(3).save_top_k(-1))});
      }
      lt::Trainer trainer(run_options);
      trainer.fit(model, sampled_loader(), nullptr, ckpt_path);
      return model->flat();
    };
    const torch::Tensor full = run(lt::StateDictType::kFull, "");
    const torch::Tensor sharded = run(lt::StateDictType::kSharded, "");
    LT_WORKER_CHECK(sharded.equal(full), name_of(sharding), ": the sharded-saving run differs from the full-saving one");
    const torch::Tensor resumed =
        run(lt::StateDictType::kSharded, dir + "/" + name_of(sharding) + "/sharded/epoch=0-step=3.ckpt");
    LT_WORKER_CHECK(resumed.equal(full), name_of(sharding), " resumed from its mid-epoch sharded checkpoint differs by ",
                    (resumed - full).abs().max().item<double>());
  }
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp).state_dict_type(lt::StateDictType::kFull);
  return 0;
}

// Loads LT_LOAD on WORLD_SIZE ranks under LT_STRATEGY (fsdp: FULL_SHARD; ddp;
// single: one process) and, as the run starts, saves what it loaded as a full
// checkpoint LT_OUT.
LT_TEST_WORKER(FsdpCheckpointLoad) {
  const int ws = env_int("WORLD_SIZE");
  const std::string strategy = env_str("LT_STRATEGY");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  auto save = std::make_shared<lt::LambdaCallback>();
  save->on_train_start_fn = [out = env_str("LT_OUT")](lt::Trainer& trainer, lt::LightningModule&) {
    trainer.save_checkpoint(out);
  };
  auto model = std::make_shared<JoinNet>(/*units=*/strategy == "fsdp");
  model->optim = "adam";
  auto run_options = strategy == "fsdp" ? sampled_options(fsdp(), ws)
                     : strategy == "ddp" ? sampled_options(ddp(), ws)
                                         : sampled_options(nullptr, 1);
  lt::Trainer trainer(run_options.max_steps(4).callbacks({save}));
  trainer.fit(model, sampled_loader(), nullptr, env_str("LT_LOAD"));
  return 0;
}

namespace {
// Every tensor of `a` and `b`'s state_dict and optimizer state, bitwise.
void expect_same_state(const std::string& a, const std::string& b) {
  const auto one = lt::pickle_load_file(a).toGenericDict(), other = lt::pickle_load_file(b).toGenericDict();
  const auto weights = one.at("state_dict").toGenericDict(), other_weights = other.at("state_dict").toGenericDict();
  ASSERT_EQ(weights.size(), other_weights.size()) << a << " and " << b;
  for (const auto& item : weights) {
    EXPECT_TRUE(item.value().toTensor().equal(other_weights.at(item.key()).toTensor()))
        << item.key().toStringRef() << " of " << a << " and " << b;
  }
  const torch::Tensor state = optimizer_state_of(a, "adam"), other_state = optimizer_state_of(b, "adam");
  EXPECT_TRUE(state.numel() > 0 && state.equal(other_state)) << "the optimizer state of " << a << " and " << b;
}
}  // namespace

// A sharded checkpoint (a folder: meta.pt and a file per rank) written by 2
// ranks, mid-epoch, has the values of the full one of the same run (read in
// one process), resumes on 2 ranks as the uninterrupted run (bitwise), and
// loads on 3 FULL_SHARD ranks, on 2 ddp ranks and in one process with
// bitwise the module and optimizer state it holds.
TEST(FsdpCheckpoint, AShardedCheckpointOfTwoRanksLoadsOnThreeOnOneAndUnderDdpBitwise) {
  const auto dir = std::filesystem::temp_directory_path() / ("lt_fsdp_sharded_" + std::to_string(::getpid()));
  expect_workers_pass("FsdpShardedCheckpointWrite", 2, std::chrono::seconds(120), {{"LT_CKPT_DIR", dir.string()}});
  for (const char* sharding : {"SHARD_GRAD_OP", "FULL_SHARD"}) {
    const auto sharded = dir / sharding / "sharded" / "epoch=0-step=3.ckpt";
    const auto full = (dir / sharding / "full" / "epoch=0-step=3.ckpt").string();
    ASSERT_TRUE(lt::is_sharded_checkpoint(sharded.string())) << sharded;
    std::vector<std::string> files;
    for (const auto& entry : std::filesystem::directory_iterator(sharded)) files.push_back(entry.path().filename());
    std::sort(files.begin(), files.end());
    ASSERT_EQ(files.size(), 3u) << sharded;
    EXPECT_EQ(files[0], "meta.pt");
    EXPECT_EQ(files[1].rfind("shard_0_of_2-", 0), 0u) << files[1];
    EXPECT_EQ(files[2].rfind("shard_1_of_2-", 0), 0u) << files[2];
    lt::check_checkpoint_file(sharded.string());
    expect_same_state(sharded.string(), full);
    for (const auto& [strategy, ranks] : {std::pair<std::string, int>{"fsdp", 3}, {"ddp", 2}, {"single", 1}}) {
      const std::string out = (dir / sharding).string() + "/loaded_" + strategy + ".ckpt";
      expect_workers_pass("FsdpCheckpointLoad", ranks, std::chrono::seconds(60),
                          {{"LT_LOAD", sharded.string()}, {"LT_OUT", out}, {"LT_STRATEGY", strategy}});
      SCOPED_TRACE(std::string(sharding) + " loaded under " + strategy);
      expect_same_state(out, full);
    }
  }
  std::filesystem::remove_all(dir);
}

// reduce_dtype float16 (PyTorch's MixedPrecision.reduce_dtype) reduces the
// gradients as ddp's fp16_compress_hook does (cast, divide by the world size,
// reduce, cast back): on 2 ranks with 3 and 5 batches (lockstep Join), Adam,
// 2 epochs, every sharding ends with ddp-with-the-hook's weights, bitwise,
// and not with float32 ddp's (the reduction really ran in float16).
LT_TEST_WORKER(FsdpReduceDtype) {
  const int rank = env_int("RANK");
  auto train = [&](const std::shared_ptr<lt::Strategy>& strategy, bool units) {
    auto model = std::make_shared<JoinNet>(units);
    model->optim = "adam";
    lt::Trainer trainer(options(strategy, 2).max_epochs(2));
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    return model->flat();
  };
  ddp()->options().ddp_comm_hook(lt::DDPCommHook::kFp16Compress);
  const torch::Tensor hooked = train(ddp(), false);
  ddp()->options().ddp_comm_hook(lt::DDPCommHook::kAllreduce);
  const torch::Tensor fp32 = train(ddp(), false);
  LT_WORKER_CHECK((hooked - fp32).abs().max().item<double>() > 1e-6, "float16 reductions changed nothing");
  fsdp()->options().reduce_dtype(lt::ReduceDtype::kFloat16);
  for (const auto sharding : {lt::ShardingStrategy::kShardGradOp, lt::ShardingStrategy::kFullShard,
                              lt::ShardingStrategy::kNoShard}) {
    fsdp()->options().sharding_strategy(sharding);
    const torch::Tensor sharded = train(fsdp(), sharding == lt::ShardingStrategy::kFullShard);
    const double differ = (sharded - hooked).abs().max().item<double>();
    LT_WORKER_CHECK(differ == 0.0, lt::OptionCodec<lt::ShardingStrategy>::show(sharding),
                    " with reduce_dtype float16 differs from ddp's fp16_compress_hook by ", differ);
  }
  fsdp()->options().reduce_dtype(lt::ReduceDtype::kFloat32).sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  return 0;
}

TEST(FsdpMixedPrecision, ReduceDtypeFloat16ReducesAsDdpsFp16CompressHook) {
  expect_workers_pass("FsdpReduceDtype", 2, std::chrono::seconds(90));
}

// FULL_SHARD keeps only each unit's chunk between steps: after the first
// window (the canonical one) every declared unit's parameters have no bytes
// at the end of each training step, on a rank that trains and on one that
// ran out of data (2 and 6 batches, Join); after fit the module is whole
// again and the same on every rank.
LT_TEST_WORKER(FsdpFullShardFrees) {
  const int rank = env_int("RANK");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  auto model = std::make_shared<JoinNet>(/*units=*/true);
  int64_t checked = 0;
  auto callback = std::make_shared<lt::LambdaCallback>();
  // After each step, on a joined rank too (lockstep Join).
  callback->on_after_optimizer_step_fn = [&](lt::Trainer& trainer, lt::LightningModule& module) {
    if (trainer.global_step() < 2) return;
    for (const auto& p : module.named_parameters()) {
      LT_WORKER_CHECK(p.value().storage().nbytes() == 0, "step ", trainer.global_step(), ": ", p.key(),
                      " holds ", p.value().storage().nbytes(), " bytes between steps");
    }
    ++checked;
  };
  lt::Trainer trainer(options(fsdp(), 2).max_epochs(1).callbacks({callback}));
  trainer.fit(model, rank_loader(rank, rank == 0 ? 2 : 6));
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kShardGradOp);
  LT_WORKER_CHECK(checked == 5, "checked ", checked, " steps of 6");  // rank 0 joined after 2 (lockstep)
  const torch::Tensor params = model->flat();
  const torch::Tensor all = fsdp()->all_gather(params);
  LT_WORKER_CHECK((all - all[0]).abs().max().item<double>() == 0.0 && params.abs().sum().item<double>() > 0,
                  "after fit the module is not whole and alike");
  return 0;
}

TEST(FsdpFullShard, ParametersHoldNoBytesBetweenStepsAndTheModuleIsWholeAfterFit) {
  expect_workers_pass("FsdpFullShardFrees", 2, std::chrono::seconds(60));
}

// Backward prefetch (BACKWARD_PRE, the default): when unit b's gradients
// start (a hook on b's output, which runs after the strategy's), unit a's
// gather is already under way, so a's parameters have their bytes; with NONE
// they have none until a's own gradients start. Both end with the same
// weights, on a rank that trains and on one that joined (3 and 5 batches).
class ThreeUnitNet : public lt::LightningModule {
 public:
  ThreeUnitNet() {
    torch::manual_seed(0);
    a = register_module("a", lt::FSDPUnit<torch::nn::Linear>(3, 3));
    b = register_module("b", lt::FSDPUnit<torch::nn::Linear>(3, 3));
    c = register_module("c", lt::FSDPUnit<torch::nn::Linear>(3, 1));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    torch::Tensor h = b(torch::tanh(a(batch.data.to(torch::kFloat))));
    if (h.requires_grad()) {
      h.register_hook([this](const torch::Tensor& grad) {
        if (global_step() >= 1) a_whole_at_b.push_back(a->parameters()[0].storage().nbytes() > 0);
        return grad;
      });
    }
    return torch::mse_loss(c(torch::tanh(h)), batch.target.to(torch::kFloat));
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  lt::FSDPUnit<torch::nn::Linear> a{nullptr}, b{nullptr}, c{nullptr};
  std::vector<bool> a_whole_at_b;  // from the second step on (after the canonical window)
};

LT_TEST_WORKER(FsdpBackwardPrefetch) {
  const int rank = env_int("RANK");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  std::vector<torch::Tensor> weights;
  for (const auto prefetch : {lt::BackwardPrefetch::kBackwardPre, lt::BackwardPrefetch::kNone}) {
    fsdp()->options().backward_prefetch(prefetch);
    auto model = std::make_shared<ThreeUnitNet>();
    lt::Trainer trainer(options(fsdp(), 2).max_epochs(1));
    trainer.fit(model, rank_loader(rank, rank == 0 ? 3 : 5));
    const bool pre = prefetch == lt::BackwardPrefetch::kBackwardPre;
    const auto& seen = model->a_whole_at_b;
    LT_WORKER_CHECK(!seen.empty() && std::all_of(seen.begin(), seen.end(), [&](bool whole) { return whole == pre; }),
                    pre ? "BACKWARD_PRE" : "NONE", ": unit a's parameters ", pre ? "had no bytes" : "had bytes",
                    " when unit b's gradients started (", seen.size(), " backward passes)");
    std::vector<torch::Tensor> flat;
    for (const auto& p : model->parameters()) flat.push_back(p.detach().reshape(-1));
    weights.push_back(torch::cat(flat));
  }
  fsdp()->options().backward_prefetch(lt::BackwardPrefetch::kBackwardPre).sharding_strategy(
      lt::ShardingStrategy::kShardGradOp);
  LT_WORKER_CHECK(torch::equal(weights[0], weights[1]), "BACKWARD_PRE and NONE end with other weights: ",
                  (weights[0] - weights[1]).abs().max().item<double>());
  return 0;
}

TEST(FsdpFullShard, BackwardPrefetchGathersTheNextUnitAheadAndChangesNoValue) {
  expect_workers_pass("FsdpBackwardPrefetch", 2, std::chrono::seconds(60));
}

// A model whose units run in another order after the first steps (here: in
// reverse from batch 3 on) is stopped with an error naming the units, on
// every rank, before the collective that would not match.
class OrderFlippingNet : public lt::LightningModule {
 public:
  OrderFlippingNet() {
    a = register_module("a", lt::FSDPUnit<torch::nn::Linear>(3, 3));
    b = register_module("b", lt::FSDPUnit<torch::nn::Linear>(3, 3));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t batch_idx) override {
    torch::Tensor x = batch.data.to(torch::kFloat);
    x = batch_idx < 3 ? b(a(x)) : a(b(x));
    return x.pow(2).mean();
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), torch::optim::SGDOptions(0.1));
  }
  lt::FSDPUnit<torch::nn::Linear> a{nullptr};
  lt::FSDPUnit<torch::nn::Linear> b{nullptr};
};

LT_TEST_WORKER(FsdpUnitOrderChange) {
  const int rank = env_int("RANK");
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kFullShard);
  try {
    lt::Trainer trainer(options(fsdp(), 2).max_epochs(1));
    trainer.fit(std::make_shared<OrderFlippingNet>(), rank_loader(rank, 5));
  } catch (const std::exception& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("the all_gather of unit 'b' where every earlier micro-batch had the all_gather of "
                              "unit 'a'") != std::string::npos,
                    "unexpected error: ", what);
    return 0;
  }
  LT_WORKER_CHECK(false, "the order change was not refused");
  return 1;
}

TEST(FsdpFullShard, UnitsRunInAnotherOrderAreRefusedNamingThem) {
  expect_workers_pass("FsdpUnitOrderChange", 2, std::chrono::seconds(60));
}

// HYBRID_SHARD on ranks that are not laid out node by node (here rank 0 on
// node 1 and rank 1 on node 0) is refused on every rank, naming the layout.
LT_TEST_WORKER(FsdpHybridLayoutRefused) {
  fsdp()->options().sharding_strategy(lt::ShardingStrategy::kHybridShard);
  try {
    lt::Trainer trainer(options(fsdp(), 2));
    trainer.fit(std::make_shared<JoinNet>(), rank_loader(env_int("RANK"), 2));
  } catch (const lt::ValueError& e) {
    const std::string what = e.what();
    LT_WORKER_CHECK(what.find("HYBRID_SHARD") != std::string::npos &&
                        what.find("global rank = node_rank * local_world_size + local_rank") != std::string::npos &&
                        what.find(c10::str("this rank is ", env_int("RANK"), " of 2, node ", 1 - env_int("RANK"))) !=
                            std::string::npos,
                    what);
    return 0;
  }
  LT_WORKER_CHECK(false, "the layout was not refused");
  return 1;
}

TEST(FsdpStrategy, HybridShardOnRanksNotLaidOutByNodeIsRefusedOnEveryRank) {
  WorkerOptions options;
  options.timeout = std::chrono::seconds(60);
  options.rank_env = {{{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}, {"GROUP_RANK", "1"}},
                      {{"LOCAL_RANK", "0"}, {"LOCAL_WORLD_SIZE", "1"}, {"GROUP_RANK", "0"}}};
  const WorkersResult result = run_workers("FsdpHybridLayoutRefused", 2, options);
  EXPECT_TRUE(result.ok()) << result.summary();
}
