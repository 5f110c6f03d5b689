// The fsdp strategy: sharded gradients and optimizer state under lockstep
// Join, against the Python oracle's window rule (tests/fixtures/join_lockstep.txt:
// PyTorch's own FSDP has no Join and its ZeroRedundancyOptimizer under Join
// steps stale shards, so the oracle is the single-optimizer window rule) and
// against the ddp strategy. Real worker processes, gloo on 127.0.0.1.
// This file: full checkpoints of a sharded run resume
// exactly (and are ddp's, streamed, for torch.load); sharded checkpoints
// load on other world sizes and under ddp, bitwise.
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
#include "plugins/strategies/fsdp/fsdp_fixture.h"
#include "support/multiprocess.h"

// env_int, the Join oracle's model, data and fixtures, fsdp(), ddp(), options()
// (plugins/strategies/fsdp/fsdp_fixture.h).
using namespace lt::testing;

namespace {

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
      for (const auto& state : ckpt.at("optimizer_states").toListRef()[0].toGenericDict().at("state").toGenericDict()) {
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

// A CheckpointIO of one's own with state_dict_type sharded (whose folder
// fsdp writes itself) is refused before the first step, on every rank.
LT_TEST_WORKER(FsdpShardedRefusesACheckpointIOOfOnesOwn) {
  class Elsewhere : public lt::CheckpointIO {
   public:
    void save_checkpoint(const c10::IValue&, const std::string&, const lt::DeferredValues&) override {}
    c10::IValue load_checkpoint(const std::string&, bool) override { return {}; }
    void remove_checkpoint(const std::string&) override {}
  };
  auto strategy = std::make_shared<lt::FSDPStrategy>(lt::FSDPStrategyOptions()
                                                         .process_group_timeout(std::chrono::seconds(30))
                                                         .state_dict_type(lt::StateDictType::kSharded));
  strategy->set_checkpoint_io(std::make_shared<Elsewhere>());
  auto model = std::make_shared<JoinNet>();
  lt::Trainer trainer(sampled_options(strategy, 2));
  std::string error = "<trained>";
  try {
    trainer.fit(model, sampled_loader());
  } catch (const lt::ValueError& e) {
    error = e.what();
  }
  LT_WORKER_CHECK(error.find("state_dict_type: sharded writes its folder") != std::string::npos, error);
  LT_WORKER_CHECK(model->training_steps == 0, "trained ", model->training_steps, " steps before refusing");
  return 0;
}

TEST(FsdpCheckpoint, ShardedRefusesACheckpointIOOfOnesOwnBeforeTheFirstStep) {
  expect_workers_pass("FsdpShardedRefusesACheckpointIOOfOnesOwn", 2, std::chrono::seconds(60));
}
