// tuner/tuning.h, tuner/lr_finder.h: lr_find's rates, smoothed losses, early
// stop and suggestion are Lightning 2.6's, checked by Lightning's own classes
// on the sweep's results (tests/python/lr_find_oracle.py); the module leaves
// the sweep as it came; the plot is an SVG with the sweep's points and the
// suggestion; update_attr writes the hparams. On 2 ranks with uneven inputs
// (lockstep Join), under ddp and fsdp FULL_SHARD, every rank records the same
// sweep, and a fit after the sweep ends with the weights of a fit without one.
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <regex>
#include <string>

#include <gtest/gtest.h>

#include <lightning_cpp/lightning.h>
#include <lightning_cpp/tuner/tuning.h>

#include "distributed/join_oracle.h"
#include "support/command.h"
#include "support/multiprocess.h"
#include "support/seeding.h"

namespace fs = std::filesystem;
using namespace lt::testing;

namespace {

// y = x w* + noise; a 8 -> 16 -> 1 MLP with SGD at the lr in its hparams.
class Regressor : public lt::LightningModule {
 public:
  Regressor() {
    fc1_ = register_module("fc1", torch::nn::Linear(8, 16));
    fc2_ = register_module("fc2", torch::nn::Linear(16, 1));
    hparams()["lr"] = 0.01;
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    return torch::mse_loss(fc2_(torch::tanh(fc1_(b.data))), b.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(),
                                               torch::optim::SGDOptions(std::get<double>(hparams().at("lr").value())));
  }
  torch::Tensor flat() const {
    std::vector<torch::Tensor> out;
    for (const auto& p : parameters()) out.push_back(p.detach().reshape(-1).clone());
    return torch::cat(out);
  }

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

std::shared_ptr<lt::DataLoader> regression_data(int64_t n) {
  auto x = torch::randn({n, 8});
  auto y = x.matmul(torch::linspace(-1, 1, 8).unsqueeze(1)) + 0.1 * torch::randn({n, 1});
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y), lt::DataLoaderOptions(16));
}

std::string write_results(const lt::LRFinder& f, const fs::path& path) {
  std::ofstream out(path);
  out.precision(17);
  out << "lr,raw_loss,loss\n";
  for (size_t i = 0; i < f.lrs.size(); ++i) out << f.lrs[i] << "," << f.raw_losses[i] << "," << f.losses[i] << "\n";
  return path.string();
}

// Runs the oracle; its output, and whether it passed.
std::pair<bool, std::string> lightning_agrees(const lt::LRFinder& f, const fs::path& csv,
                                              const lt::LRFinderOptions& o) {
  int code = -1;
  const std::vector<std::string> lines = command_lines(
      c10::str(LT_PYTHON, " -W ignore ", LT_SOURCE_DIR, "/tests/python/lr_find_oracle.py ", write_results(f, csv),
               " ", o.min_lr(), " ", o.max_lr(), " ", o.num_training(), " ", o.mode(), " ",
               o.early_stop_threshold() ? c10::str(*o.early_stop_threshold()) : std::string("none"), " ",
               f.suggestion_index().value_or(-1)),
      code);
  return {code == 0, c10::Join("\n", lines)};
}

class LRFinderTest : public SeedingFixture {
 protected:
  void SetUp() override {
    SeedingFixture::SetUp();
    char tmpl[] = "/tmp/lt_lr_finder_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  lt::TrainerOptions options() const {
    return lt::TrainerOptions().max_epochs(1).default_root_dir(dir_.string()).enable_progress_bar(false)
        .enable_model_summary(false);
  }
  fs::path dir_;
};

// A sweep to 10 diverges and stops early; one to 1 runs its 60 steps. Both
// equal Lightning's on the same losses, and the module is untouched.
TEST_F(LRFinderTest, SweepStopAndSuggestionAreLightnings) {
  for (const auto& [max_lr, mode] : std::vector<std::pair<double, std::string>>{{10.0, "exponential"},
                                                                                 {1.0, "exponential"},
                                                                                 {0.5, "linear"}}) {
    auto model = std::make_shared<Regressor>();
    const torch::Tensor before = model->flat();
    lt::Trainer trainer(options());
    const auto o = lt::LRFinderOptions().min_lr(1e-5).max_lr(max_lr).num_training(60).mode(mode).update_attr(false);
    const lt::LRFinder f = lt::Tuner(trainer).lr_find(model, regression_data(512), o);
    SCOPED_TRACE(c10::str(mode, " to ", max_lr));
    ASSERT_GE(f.lrs.size(), 12u);
    EXPECT_EQ(f.lrs.front(), 1e-5);
    if (max_lr == 10.0) EXPECT_LT(f.lrs.size(), 60u) << "a sweep to 10 did not diverge";
    if (max_lr == 1.0) EXPECT_EQ(f.lrs.size(), 60u);
    ASSERT_TRUE(f.suggestion().has_value());
    const auto [agree, why] = lightning_agrees(f, dir_ / "sweep.csv", o);
    EXPECT_TRUE(agree) << why;
    EXPECT_TRUE(torch::equal(model->flat(), before)) << "the sweep changed the module";
    EXPECT_EQ(std::get<double>(model->hparams().at("lr").value()), 0.01) << "update_attr is off";
  }
}

// The plot: every finite point in a polyline, the suggestion a red circle at
// its point, a log axis labelled in decades; update_attr writes hparams' lr.
TEST_F(LRFinderTest, PlotAndUpdateAttr) {
  auto model = std::make_shared<Regressor>();
  lt::Trainer trainer(options());
  const lt::LRFinder f = lt::Tuner(trainer).lr_find(
      model, regression_data(512), lt::LRFinderOptions().min_lr(1e-5).max_lr(1).num_training(40));  // update_attr
  const std::string svg = f.plot((dir_ / "lr_find.svg").string());
  EXPECT_EQ(svg, read_file((dir_ / "lr_find.svg").string()));
  const std::smatch points = [&] {
    std::smatch m;
    std::regex_search(svg, m, std::regex("<polyline[^>]*points=\"([^\"]*)\""));
    return m;
  }();
  ASSERT_EQ(points.size(), 2u) << svg;
  const std::string list = points[1].str();
  EXPECT_EQ(std::count(list.begin(), list.end(), ','), 40) << "one point a step";
  EXPECT_NE(svg.find("fill=\"red\""), std::string::npos) << "no suggestion marked";
  EXPECT_NE(svg.find(">1e-5<"), std::string::npos) << "no decade label at the first rate";
  EXPECT_NE(svg.find(c10::str("suggestion ", *f.suggestion())), std::string::npos) << svg.substr(0, 400);
  EXPECT_EQ(std::get<double>(model->hparams().at("lr").value()), *f.suggestion());
  // update_attr on a module without the key: an error before anything runs.
  auto bare = std::make_shared<Regressor>();
  bare->hparams().erase("lr");
  bare->hparams()["width"] = int64_t{16};
  try {
    lt::Tuner(trainer).lr_find(bare, regression_data(64));
    FAIL() << "update_attr without an lr key ran";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("neither 'lr' nor 'learning_rate' (width)"), std::string::npos) << e.what();
  }
  EXPECT_THROW(lt::Tuner(trainer).lr_find(model, regression_data(64), lt::LRFinderOptions().min_lr(2).max_lr(1)),
               lt::ValueError);
}

// 2 ranks with 7 and 4 batches of JoinNet's data, num_training 6 over 2
// epochs: every rank records the same sweep, which Lightning's classes agree
// with; a fit after it ends with the weights of the same fit without one.
LT_TEST_WORKER(LRFindUnevenInputs) {
  const int rank = env_int("RANK");
  static auto ddp =
      std::make_shared<lt::DDPStrategy>(lt::DDPStrategyOptions().process_group_timeout(std::chrono::seconds(30)));
  static auto fsdp = std::make_shared<lt::FSDPStrategy>(lt::FSDPStrategyOptions()
                                                            .process_group_timeout(std::chrono::seconds(30))
                                                            .sharding_strategy(lt::ShardingStrategy::kFullShard));
  for (const std::shared_ptr<lt::Strategy>& strategy : std::vector<std::shared_ptr<lt::Strategy>>{ddp, fsdp}) {
    const auto options = lt::TrainerOptions()
                             .strategy(strategy)
                             .accelerator("cpu")
                             .devices(2)
                             .max_epochs(2)
                             .default_logger(false)
                             .enable_progress_bar(false)
                             .enable_model_summary(false)
                             .default_root_dir(fs::temp_directory_path().string());
    const bool units = strategy == fsdp;
    const auto data = [&] { return rank_loader(rank, rank == 0 ? 7 : 4); };
    auto plain = std::make_shared<JoinNet>(units);
    lt::Trainer(options).fit(plain, data());

    auto tuned = std::make_shared<JoinNet>(units);
    lt::Trainer trainer(options);
    const auto o = lt::LRFinderOptions().min_lr(1e-4).max_lr(1).num_training(12).early_stop_threshold(std::nullopt)
                       .update_attr(false);  // JoinNet has no hparams
    const lt::LRFinder f = lt::Tuner(trainer).lr_find(tuned, data(), o);
    const std::string who = strategy->name();
    LT_WORKER_CHECK(f.lrs.size() == 12, who, ": ", f.lrs.size(), " steps");
    // Every rank's sweep is rank 0's.
    std::ostringstream mine;
    mine.precision(17);
    for (size_t i = 0; i < f.lrs.size(); ++i) mine << f.lrs[i] << " " << f.raw_losses[i] << " " << f.losses[i] << "\n";
    const auto all = strategy->all_gather_bytes(mine.str());
    LT_WORKER_CHECK(all.at(0) == all.at(1), who, ": rank 0's sweep\n", all.at(0), "rank 1's\n", all.at(1));
    if (rank == 0) {
      const fs::path csv = fs::temp_directory_path() / c10::str("lt_lr_find_", ::getppid(), "_", who, ".csv");
      const auto [agree, why] = lightning_agrees(f, csv, o);
      fs::remove(csv);
      LT_WORKER_CHECK(agree, who, ": ", why);
    }
    trainer.fit(tuned, data());
    const double differ = (tuned->flat() - plain->flat()).abs().max().item<double>();
    LT_WORKER_CHECK(differ == 0.0, who, ": a fit after lr_find differs from one without by ", differ);
  }
  return 0;
}

TEST(LRFinderDistributed, EveryRankRecordsLightningsSweepUnderJoinDdpAndFsdp) {
  expect_workers_pass("LRFindUnevenInputs", 2, std::chrono::seconds(120));
}

}  // namespace
