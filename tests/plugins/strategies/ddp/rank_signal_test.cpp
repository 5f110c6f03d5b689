// core/signals.h under DDP, real worker processes over Gloo: a SIGTERM on one
// rank (before a backward or after an optimizer step, with pad or lockstep
// Join) stops every rank after the same accumulation window, with equal
// parameters.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <string>
#include <vector>

#include <lightning_cpp/callbacks/lambda_callback.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/signals.h>
#include <lightning_cpp/core/state_dict.h>
#include <lightning_cpp/plugins/strategies/ddp/ddp.h>
#include <lightning_cpp/trainer/trainer.h>

#include "plugins/strategies/ddp/ddp_fixture.h"
#include "support/multiprocess.h"

using lt::testing::env_int;
using lt::testing::env_str;
using lt::testing::run_workers;
using namespace lt::testing::ddp;  // TinyNet, its data and the workers' options (ddp_fixture.h)

// -- a signal on one rank: every rank stops after the same window ------------------------

// Two ranks, accumulate_grad_batches 2. LT_MODE pad: 8 batches of 4 on each
// rank; join: rank 0 has 3 batches of its own, rank 1 10 (lockstep Join, on
// a schedule). Rank LT_SIGNAL_RANK raises SIGTERM before its LT_AT-th
// backward (LT_WHEN=backward) or after the optimizer step that reaches global
// step LT_AT (LT_WHEN=step; under Join a joined rank runs that hook too). The
// fit must end with lt::Interrupted at global step LT_EXPECT on every rank,
// with equal parameters. LT_DDP: bucket_view (gradient_as_bucket_view) or
// find_unused (find_unused_parameters).
LT_TEST_WORKER(OneRankSignal) {
  const int64_t rank = env_int("RANK"), at = env_int("LT_AT"), expect = env_int("LT_EXPECT");
  const bool join = env_str("LT_MODE") == "join", raises = rank == env_int("LT_SIGNAL_RANK");
  auto signal = std::make_shared<lt::LambdaCallback>();
  auto backwards = std::make_shared<int64_t>(0);
  if (raises && env_str("LT_WHEN") == "backward") {
    signal->on_before_backward_fn = [backwards, at](lt::Trainer&, lt::LightningModule&, const torch::Tensor&) {
      if (++*backwards == at) ::raise(SIGTERM);
    };
  } else if (raises) {
    signal->on_after_optimizer_step_fn = [at](lt::Trainer& trainer, lt::LightningModule&) {
      if (trainer.global_step() == at) ::raise(SIGTERM);
    };
  }
  auto data = make_data(64);
  const int64_t begin = join ? (rank == 0 ? 0 : 12) : 0, count = join ? (rank == 0 ? 12 : 40) : 64;
  auto loader = std::make_shared<lt::DataLoader>(
      std::make_shared<lt::TensorDataset>(data.x.narrow(0, begin, count), data.y.narrow(0, begin, count)),
      lt::DataLoaderOptions(4));
  auto net = make_net(-1);
  lt::Trainer trainer(
      lt::TrainerOptions()
          .devices(2)
          .strategy(std::make_shared<lt::DDPStrategy>(
              test_strategy_options()
                  .uneven_inputs(join ? lt::UnevenInputs::kJoin : lt::UnevenInputs::kPad)
                  .gradient_as_bucket_view(env_str("LT_DDP") == "bucket_view")
                  .find_unused_parameters(env_str("LT_DDP") == "find_unused")))
          .use_distributed_sampler(!join)
          .accumulate_grad_batches(2)
          .max_epochs(1)
          .enable_progress_bar(false)
          .callbacks({signal})
          .default_root_dir(env_str("LT_OUT")));
  try {
    trainer.fit(net, loader);
    LT_WORKER_CHECK(false, "rank ", rank, " finished the fit at global step ", trainer.global_step());
  } catch (const lt::Interrupted& e) {
    LT_WORKER_CHECK(trainer.global_step() == expect, "rank ", rank, " stopped at global step ",
                    trainer.global_step(), ": ", e.what());
  }
  lt::atomic_pickle_save(c10::List<torch::Tensor>(parameter_list(*net)),
                         env_str("LT_OUT") + "/params_" + std::to_string(rank));
  return 0;
}

// The gradient allreduce carries the wish: a signal that arrives before the
// window's synced backward stops every rank after that window (through the
// store it took one window more); one that arrives after it, after the next.
// A joined rank's wish rides in its zero bucket.
TEST(Ddp, OneRanksSignalStopsEveryRankAfterTheSameWindow) {
  struct Case {
    const char* mode;
    int signal_rank;
    const char* when;
    int at, expect;
    const char* ddp = "";
  };
  for (const Case& c : {Case{"pad", 1, "backward", 6, 3},  // batch 5 ends window 2 (step 3)
                        Case{"pad", 0, "backward", 5, 3},  // batch 4: no_sync, the wish waits for batch 5
                        Case{"pad", 0, "step", 2, 3},
                        Case{"join", 1, "backward", 8, 4},  // rank 0 joined after step 2
                        Case{"join", 0, "step", 3, 4},      // rank 0 signals while joined
                        Case{"pad", 1, "backward", 6, 3, "bucket_view"},
                        Case{"join", 0, "step", 3, 4, "bucket_view"},
                        Case{"pad", 1, "backward", 6, 3, "find_unused"},
                        Case{"join", 0, "step", 3, 4, "find_unused"}}) {
    const std::string what =
        c10::str(c.mode, " ", c.ddp, ", rank ", c.signal_rank, " before backward/after step ", c.at);
    lt::testing::WorkerOptions options;
    options.env = {{"LT_OUT", out_dir("one_rank_signal")}, {"LT_MODE", c.mode},
                   {"LT_SIGNAL_RANK", std::to_string(c.signal_rank)}, {"LT_WHEN", c.when},
                   {"LT_AT", std::to_string(c.at)}, {"LT_EXPECT", std::to_string(c.expect)},
                   {"LT_DDP", c.ddp}};
    auto r = run_workers("OneRankSignal", 2, options);
    EXPECT_TRUE(r.ok()) << what << ": " << r.summary();
    if (r.ok()) {
      const auto p0 = lt::tensor_list(lt::pickle_load_file(options.env["LT_OUT"] + "/params_0"));
      const auto p1 = lt::tensor_list(lt::pickle_load_file(options.env["LT_OUT"] + "/params_1"));
      ASSERT_EQ(p0.size(), p1.size());
      for (size_t i = 0; i < p0.size(); ++i) EXPECT_TRUE(p0[i].equal(p1[i])) << what << ": parameter " << i;
    }
    std::filesystem::remove_all(options.env["LT_OUT"]);
  }
}
