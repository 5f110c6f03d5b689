// Checkpoints: Python reads what C++ writes (names and values), C++ loads a
// state_dict Python saved, and a fit resumed from a checkpoint ends with the
// same weights as an uninterrupted one.
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <sstream>
#include <tuple>
#include <utility>

#include <gtest/gtest.h>
#include <caffe2/serialize/inline_container.h>
#include <torch/csrc/jit/serialization/export.h>
#include <torch/version.h>
#include <torch/csrc/jit/serialization/pickle.h>
#include <torch/csrc/jit/serialization/pickler.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/rank_zero.h>
#include <lightning_cpp/loggers/csv.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/multiprocess.h"
#include "support/seeding.h"

using lt::testing::read_file;

namespace fs = std::filesystem;

namespace {

constexpr const char* kPython = LT_PYTHON;  // the torch of the LibTorch built against

// Same layout as Reference in tests/python/checkpoint_interop.py.
class Reference : public lt::LightningModule {
 public:
  Reference() {
    encoder_ = register_module("encoder", torch::nn::Sequential(torch::nn::Linear(4, 8), torch::nn::BatchNorm1d(8),
                                                                 torch::nn::ReLU()));
    head_ = register_module("head", torch::nn::Linear(8, 2));
    hparams()["width"] = 8;
    hparams()["lr"] = 0.01;
    hparams()["amsgrad"] = false;
    hparams()["name"] = "reference";
  }
  torch::Tensor forward(const torch::Tensor& x) { return head_(encoder_->forward(x)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    auto out = forward(torch::dropout(b.data, 0.2, is_training()));  // draws from the global generator
    auto loss = torch::mse_loss(out, b.target);
    log("train_loss", loss);
    return loss;
  }
  void validation_step(const lt::Batch& b, int64_t) override { log("val_loss", torch::mse_loss(forward(b.data), b.target)); }
  void test_step(const lt::Batch& b, int64_t) override { log("test_loss", torch::mse_loss(forward(b.data), b.target)); }
  torch::Tensor predict_step(const lt::Batch& b, int64_t) override { return forward(b.data); }
  lt::OptimizerConfig configure_optimizers() override {
    auto opt = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    return lt::OptimizerConfig(opt, std::make_shared<lt::StepLR>(*opt, 1, 0.7), lt::Interval::kEpoch);
  }

 private:
  torch::nn::Sequential encoder_{nullptr};
  torch::nn::Linear head_{nullptr};
};

std::shared_ptr<lt::DataLoader> data(bool shuffle) {
  auto gen = at::detail::createCPUGenerator(11);
  auto x = at::randn({48, 4}, gen, torch::kFloat);
  auto y = torch::stack({x.sum(1), x.select(1, 0) - x.select(1, 2)}, 1);
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                          lt::DataLoaderOptions(8).shuffle(shuffle).seed(5));
}

struct CheckpointTest : lt::testing::SeedingFixture {
  void SetUp() override {
    SeedingFixture::SetUp();
    char tmpl[] = "/tmp/lt_checkpoint_test_XXXXXX";
    dir_ = ::mkdtemp(tmpl);
  }
  void TearDown() override { fs::remove_all(dir_); }
  static bool have_python_torch() {
    return std::system((std::string(kPython) + " -c 'import torch' > /dev/null 2>&1").c_str()) == 0;
  }
  static int python(const std::string& args) {
    const std::string cmd =
        std::string(kPython) + " " + LT_SOURCE_DIR + "/tests/python/checkpoint_interop.py " + args + " 2>&1";
    return std::system(cmd.c_str());
  }
  lt::TrainerOptions options(int64_t epochs) const {
    return lt::TrainerOptions().max_epochs(epochs).default_root_dir(dir_.string()).seed(0);
  }
  fs::path dir_;
};

void expect_same_weights(const torch::nn::Module& a, const torch::nn::Module& b) {
  auto sa = lt::module_state_dict(a), sb = lt::module_state_dict(b);
  ASSERT_EQ(sa.size(), sb.size());
  for (const auto& kv : sa) {
    ASSERT_TRUE(sb.contains(kv.key())) << kv.key();
    EXPECT_TRUE(torch::equal(kv.value(), sb.at(kv.key()))) << kv.key() << " differs by "
                                                           << (kv.value() - sb.at(kv.key())).abs().max().item<double>();
  }
}

TEST_F(CheckpointTest, CppCheckpointLoadsInPythonWithPyTorchNames) {
  if (!have_python_torch()) GTEST_SKIP() << kPython << " has no torch";
  auto model = std::make_shared<Reference>();
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir_.string()).save_last(true));
  lt::Trainer trainer(options(2).callbacks({mc}));
  trainer.fit(model, data(true), data(false));
  const std::string ckpt = (dir_ / "last.ckpt").string();
  const std::string back = (dir_ / "from_python.pt").string();
  ASSERT_EQ(python("read " + ckpt + " " + back), 0);

  // Names, dtypes and shapes as Python saw them.
  std::ifstream names(back + ".names");
  std::vector<std::string> seen;
  for (std::string line; std::getline(names, line);) seen.push_back(line.substr(0, line.find(' ')));
  std::sort(seen.begin(), seen.end());
  EXPECT_EQ(seen, (std::vector<std::string>{"encoder.0.bias", "encoder.0.weight", "encoder.1.bias",
                                            "encoder.1.num_batches_tracked", "encoder.1.running_mean",
                                            "encoder.1.running_var", "encoder.1.weight", "head.bias", "head.weight"}));
  // Values: Python's torch.save of what it read equals the C++ weights.
  auto reloaded = std::make_shared<Reference>();
  lt::load_weights(*reloaded, back);
  expect_same_weights(*model, *reloaded);
}

TEST_F(CheckpointTest, PythonStateDictInitialisesACppModel) {
  if (!have_python_torch()) GTEST_SKIP() << kPython << " has no torch";
  const std::string state = (dir_ / "state.pt").string(), io = (dir_ / "io.pt").string();
  ASSERT_EQ(python("write " + state + " " + io), 0);
  Reference model;
  lt::load_weights(model, state);
  model.eval();
  auto expected = lt::pickle_load_file(io).toGenericDict();
  torch::NoGradGuard no_grad;
  auto out = model.forward(expected.at("input").toTensor());
  EXPECT_TRUE(torch::allclose(out, expected.at("output").toTensor(), 1e-6, 1e-6));
  // An OrderedDict (torch.save(model.state_dict())) gets a message with the fix.
  try {
    lt::load_weights(model, state + ".ordered");
    FAIL();
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("torch.save(dict(model.state_dict()), path)"), std::string::npos) << e.what();
  }
  // A missing or unexpected key is refused in strict mode.
  lt::LightningModule* m = &model;
  auto partial = lt::module_state_dict(*m);
  ASSERT_EQ(partial.erase("head.bias"), 1u);
  EXPECT_THROW(lt::load_module_state_dict(model, partial), lt::ValueError);
}

// The optimizer's state is PyTorch's optimizer.state_dict(): Python's Adam
// loads it and takes the step the C++ Adam takes (a swapped name, a wrong
// parameter order or a lost learning rate would part them), and C++ loads
// what Python's Adam then saved.
TEST_F(CheckpointTest, OptimizerStateIsPyTorchsBothWays) {
  if (!have_python_torch()) GTEST_SKIP() << kPython << " has no torch";
  auto model = std::make_shared<Reference>();
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir_.string()).save_last(true));
  lt::Trainer trainer(options(2).callbacks({mc}));
  trainer.fit(model, data(true), data(false));
  const std::string ckpt = (dir_ / "last.ckpt").string(), io = (dir_ / "io.pt").string(),
                    out = (dir_ / "python_step.pt").string();
  auto gen = at::detail::createCPUGenerator(3);
  c10::Dict<std::string, torch::Tensor> batch;
  batch.insert("input", at::randn({6, 4}, gen, torch::kFloat));
  batch.insert("target", at::randn({6, 2}, gen, torch::kFloat));
  lt::atomic_pickle_save(batch, io);
  ASSERT_EQ(python("step " + ckpt + " " + io + " " + out), 0);

  // The same step in C++, from the same checkpoint.
  const auto saved = lt::pickle_load_file(ckpt).toGenericDict();
  Reference cpp;
  lt::load_module_state_dict(cpp, lt::state_dict_from(saved, ckpt));
  torch::optim::Adam adam(cpp.parameters(), torch::optim::AdamOptions(1.0));
  lt::load_optimizer_state_dict(adam, saved.at("optimizer"), "last.ckpt optimizer");
  EXPECT_DOUBLE_EQ(adam.param_groups()[0].options().get_lr(), 0.01 * 0.7);
  cpp.eval();
  adam.zero_grad();
  torch::mse_loss(cpp.forward(batch.at("input")), batch.at("target")).backward();
  adam.step();

  const auto python_step = lt::pickle_load_file(out).toGenericDict();
  const auto python_weights = lt::state_dict_from(python_step, out);
  for (const auto& kv : lt::module_state_dict(cpp)) {
    const torch::Tensor theirs = python_weights.at(kv.key());
    EXPECT_TRUE(torch::allclose(kv.value(), theirs, 1e-6, 1e-7))
        << kv.key() << " differs by " << (kv.value() - theirs).abs().max().item<double>();
  }
  // Python's state (its step a float tensor, its groups with options
  // LibTorch lacks) loads into a C++ Adam and equals the C++ one's.
  Reference other;
  torch::optim::Adam back(other.parameters(), torch::optim::AdamOptions(1.0));
  lt::load_optimizer_state_dict(back, python_step.at("optimizer"), out);
  const auto params = cpp.parameters(), other_params = other.parameters();
  for (size_t i = 0; i < params.size(); ++i) {
    const auto& mine = static_cast<const torch::optim::AdamParamState&>(
        *adam.state().at(lt::optimizer_state_key(params[i])));
    const auto& theirs = static_cast<const torch::optim::AdamParamState&>(
        *back.state().at(lt::optimizer_state_key(other_params[i])));
    EXPECT_EQ(mine.step(), theirs.step()) << i;
    EXPECT_TRUE(torch::allclose(mine.exp_avg(), theirs.exp_avg(), 1e-6, 1e-9)) << i;
    EXPECT_TRUE(torch::allclose(mine.exp_avg_sq(), theirs.exp_avg_sq(), 1e-6, 1e-12)) << i;
  }
  // Saved as Python saves it, its one group is a list of one element (pickle's
  // APPEND), which LibTorch 2.x reads and 1.13's unpickler cannot: there the
  // error says how to save it.
#if TORCH_VERSION_MAJOR >= 2
  Reference listed;
  torch::optim::Adam from_list(listed.parameters(), torch::optim::AdamOptions(1.0));
  lt::load_optimizer_state_dict(from_list, lt::pickle_load_file(out + ".list"), out + ".list");
  EXPECT_EQ(from_list.state().size(), back.state().size());
#else
  try {
    (void)lt::pickle_load_file(out + ".list");
    FAIL() << "LibTorch 1.13 read pickle's APPEND: the tuple advice is obsolete";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("save such a list as a tuple"), std::string::npos) << e.what();
  }
#endif
  // Another optimizer's state is refused naming what is wrong, and leaves
  // the optimizer as it was.
  torch::optim::SGD sgd(other.parameters(), torch::optim::SGDOptions(0.5).momentum(0.9));
  try {
    lt::load_optimizer_state_dict(sgd, saved.at("optimizer"), "last.ckpt optimizer");
    FAIL() << "Adam's state loaded into SGD";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("last.ckpt optimizer.state[0] has 'step'"), std::string::npos) << e.what();
  }
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.5);
  EXPECT_TRUE(sgd.state().empty());
}

TEST_F(CheckpointTest, ResumeAfterEpochKEqualsUninterruptedRun) {
  constexpr int64_t kEpochs = 5, kStopAfter = 2;
  // Uninterrupted.
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  lt::Trainer a(options(kEpochs));
  a.fit(straight, data(true), data(false));

  // Stopped after epoch kStopAfter, with last.ckpt written at that epoch's end.
  torch::manual_seed(0);
  auto first = std::make_shared<Reference>();
  auto mc = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()).save_last(true).save_top_k(0));
  lt::Trainer b(options(kStopAfter).callbacks({mc}));
  b.fit(first, data(true), data(false));
  const std::string last = (dir_ / "ckpt" / "last.ckpt").string();
  auto ckpt = lt::pickle_load_file(last).toGenericDict();
  EXPECT_EQ(ckpt.at("epoch").toInt(), kStopAfter - 1);  // saved at the end of epoch kStopAfter - 1
  EXPECT_TRUE(ckpt.at("epoch_finished").toBool());
  EXPECT_EQ(ckpt.at("global_step").toInt(), kStopAfter * 6);

  // Resumed in a fresh model and trainer (different initial weights).
  torch::manual_seed(999);
  auto resumed = std::make_shared<Reference>();
  lt::Trainer c(options(kEpochs));
  c.fit(resumed, data(true), data(false), last);
  EXPECT_EQ(c.current_epoch(), kEpochs);
  EXPECT_EQ(c.global_step(), a.global_step());
  expect_same_weights(*straight, *resumed);
}

// A checkpoint taken mid-epoch (after an optimizer step) holds where the
// epoch was: resumed, the run ends with the uninterrupted run's weights,
// bitwise (dropout's generator, Adam, the scheduler and the loader's order
// included).
TEST_F(CheckpointTest, ResumeMidEpochEqualsUninterruptedRun) {
  constexpr int64_t kEpochs = 3;  // 6 batches per epoch, accumulate 2: 3 steps per epoch
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  auto every = std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()).every_n_train_steps(2).save_top_k(-1));
  lt::Trainer a(options(kEpochs).accumulate_grad_batches(2).callbacks({every}));
  a.fit(straight, data(true), data(false));
  ASSERT_EQ(a.global_step(), 9);
  for (const char* name : {"epoch=0-step=2.ckpt", "epoch=1-step=4.ckpt", "epoch=2-step=8.ckpt"}) {
    const std::string path = (dir_ / "ckpt" / name).string();
    ASSERT_TRUE(fs::exists(path)) << path;
    auto ckpt = lt::pickle_load_file(path).toGenericDict();
    ASSERT_TRUE(ckpt.contains("epoch_iteration")) << name;
    EXPECT_EQ(ckpt.at("epoch_iteration").toInt(), ckpt.at("global_step").toInt() % 3 * 2) << name;
    torch::manual_seed(999);
    auto resumed = std::make_shared<Reference>();
    lt::Trainer c(options(kEpochs).accumulate_grad_batches(2));
    c.fit(resumed, data(true), data(false), path);
    EXPECT_EQ(c.global_step(), a.global_step()) << name;
    expect_same_weights(*straight, *resumed);
  }
  // ckpt_path "last": the newest checkpoint in the ModelCheckpoint's folder (step 9's); "best" with none: an error.
  auto in_folder = [&] {
    return std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath((dir_ / "ckpt").string()));
  };
  auto resumed = std::make_shared<Reference>();
  lt::Trainer d(options(kEpochs).accumulate_grad_batches(2).callbacks({in_folder()}));
  d.fit(resumed, data(true), data(false), "last");
  EXPECT_EQ(d.global_step(), 9);
  expect_same_weights(*straight, *resumed);
  lt::Trainer e(options(kEpochs).callbacks({std::make_shared<lt::ModelCheckpoint>(
      lt::ModelCheckpointOptions().dirpath((dir_ / "empty").string()))}));
  try {
    e.fit(std::make_shared<Reference>(), data(true), data(false), "best");
    FAIL() << "ckpt_path best without a checkpoint was accepted";
  } catch (const lt::ValueError& error) {
    EXPECT_NE(std::string(error.what()).find("ckpt_path: best: no best checkpoint was found"), std::string::npos)
        << error.what();
  }
}

// A run that dies after a checkpoint and is resumed with ckpt_path "last"
// goes on in its logger's version folder: metrics.csv ends as the
// uninterrupted run's, byte for byte (rows logged after the checkpoint are
// not there twice). validate/test in a new process find the last and the
// best checkpoint there, and log beside the training run.
TEST_F(CheckpointTest, ResumedRunContinuesItsLoggerFolderAndMetrics) {
  constexpr int64_t kEpochs = 4;  // 6 steps per epoch
  struct CrashAt : lt::Callback {
    explicit CrashAt(int64_t step) : step(step) {}
    std::string name() const override { return "crash"; }
    void on_train_batch_end(lt::Trainer& t, lt::LightningModule&, const torch::Tensor&, const lt::Batch&,
                            int64_t) override {
      if (t.global_step() == step) throw std::runtime_error("crash");
    }
    int64_t step;
  };
  auto trainer_options = [&](const fs::path& save_dir, std::vector<std::shared_ptr<lt::Callback>> extra) {
    auto logger = std::make_shared<lt::CSVLogger>(lt::CSVLoggerOptions(save_dir.string()).flush_logs_every_n_steps(1));
    // The "best" model is the worst one (mode max), so that it is not the last.
    extra.push_back(std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().monitor("val_loss").mode("max").save_last(true)));
    return options(kEpochs).log_every_n_steps(1).logger(logger).callbacks(extra);
  };
  const fs::path straight_dir = dir_ / "straight", run_dir = dir_ / "run";
  const fs::path version0 = run_dir / "lightning_logs" / "version_0";
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  lt::Trainer a(trainer_options(straight_dir, {}));
  a.fit(straight, data(true), data(false));

  torch::manual_seed(0);
  lt::Trainer b(trainer_options(run_dir, {std::make_shared<CrashAt>(15)}));
  EXPECT_THROW(b.fit(std::make_shared<Reference>(), data(true), data(false)), std::runtime_error);
  const std::string metrics = read_file(version0 / "metrics.csv");
  ASSERT_NE(metrics.find("\n2,14,"), std::string::npos) << "the crashed run's rows after its checkpoint:\n" << metrics;

  auto resumed = std::make_shared<Reference>();
  lt::Trainer c(trainer_options(run_dir, {}));
  c.fit(resumed, data(true), data(false), "last");
  expect_same_weights(*straight, *resumed);
  EXPECT_FALSE(fs::exists(run_dir / "lightning_logs" / "version_1")) << "the resumed run started a new version";
  EXPECT_EQ(read_file(version0 / "metrics.csv"),
            read_file(straight_dir / "lightning_logs" / "version_0" / "metrics.csv"));

  // validate in a new process: "best" is the best model the newest
  // checkpoint names (as the uninterrupted run does); "last" the newest file.
  auto best_name = [](lt::Trainer& t) {
    return fs::path(dynamic_cast<lt::ModelCheckpoint&>(*t.callbacks().back()).best_model_path()).filename().string();
  };
  EXPECT_EQ(best_name(c), best_name(a));
  ASSERT_NE(best_name(a), "last.ckpt");
  std::map<std::string, double> val_loss;
  for (const auto& [which, file] : {std::pair<std::string, std::string>{"best", best_name(a)}, {"last", "last.ckpt"}}) {
    lt::Trainer v(trainer_options(run_dir, {}));
    val_loss[which] = v.validate(std::make_shared<Reference>(), data(false), which).at("val_loss");
    auto model = std::make_shared<Reference>();
    lt::load_weights(*model, (version0 / "checkpoints" / file).string());
    lt::Trainer w(options(1));
    EXPECT_DOUBLE_EQ(val_loss[which], w.validate(model, data(false)).at("val_loss")) << which;
  }
  EXPECT_NE(val_loss["best"], val_loss["last"]);
  EXPECT_FALSE(fs::exists(run_dir / "lightning_logs" / "version_1")) << "validate started a new version";
  const std::string fitted = read_file(straight_dir / "lightning_logs" / "version_0" / "metrics.csv");
  const std::string after = read_file(version0 / "metrics.csv");
  EXPECT_TRUE(after.size() > fitted.size() && after.rfind(fitted, 0) == 0)
      << "validate's rows are not appended to the run's metrics.csv:\n" << after;
}

// The checkpoint's "epoch" is Lightning's: current_epoch when it was saved,
// the same number as the file name's {epoch}, mid-epoch and at the epoch's
// end alike; "epoch_finished" tells them apart. Both resume exactly, and so
// do checkpoints written before that key (whose "epoch" was the next epoch to
// run after an epoch's end).
TEST_F(CheckpointTest, CheckpointEpochIsLightningsCurrentEpoch) {
  constexpr int64_t kEpochs = 3;  // 6 steps per epoch
  torch::manual_seed(0);
  auto straight = std::make_shared<Reference>();
  auto every = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
                                                         .dirpath((dir_ / "ckpt").string())
                                                         .every_n_train_steps(5)
                                                         .every_n_epochs(1)
                                                         .save_top_k(-1));
  lt::Trainer a(options(kEpochs).callbacks({every}));
  a.fit(straight, data(true), data(false));
  ASSERT_EQ(a.global_step(), 18);
  // {file, epoch, finished}: steps 5, 10 and 15 mid-epoch, 6, 12 and 18 at epoch ends.
  const std::vector<std::tuple<std::string, int64_t, bool>> expected = {
      {"epoch=0-step=5.ckpt", 0, false},  {"epoch=0-step=6.ckpt", 0, true},  {"epoch=1-step=10.ckpt", 1, false},
      {"epoch=1-step=12.ckpt", 1, true}, {"epoch=2-step=15.ckpt", 2, false}, {"epoch=2-step=18.ckpt", 2, true}};
  for (const auto& [name, epoch, finished] : expected) {
    const fs::path path = dir_ / "ckpt" / name;
    ASSERT_TRUE(fs::exists(path)) << path;
    auto ckpt = lt::pickle_load_file(path.string()).toGenericDict();
    EXPECT_EQ(ckpt.at("epoch").toInt(), epoch) << name;
    ASSERT_TRUE(ckpt.contains("epoch_finished")) << name;
    EXPECT_EQ(ckpt.at("epoch_finished").toBool(), finished) << name;
    EXPECT_EQ(ckpt.contains("epoch_iteration"), !finished) << name;
  }
  auto resume = [&](const std::string& path) {
    torch::manual_seed(999);
    auto resumed = std::make_shared<Reference>();
    lt::Trainer c(options(kEpochs));
    c.fit(resumed, data(true), data(false), path);
    EXPECT_EQ(c.global_step(), a.global_step()) << path;
    EXPECT_EQ(c.current_epoch(), kEpochs) << path;
    expect_same_weights(*straight, *resumed);
  };
  for (const char* name : {"epoch=0-step=6.ckpt", "epoch=1-step=10.ckpt"}) resume((dir_ / "ckpt" / name).string());
  // The same checkpoints as lightning-cpp wrote them before "epoch_finished".
  for (const char* name : {"epoch=0-step=6.ckpt", "epoch=1-step=10.ckpt"}) {
    auto ckpt = lt::pickle_load_file((dir_ / "ckpt" / name).string()).toGenericDict();
    if (ckpt.at("epoch_finished").toBool()) ckpt.insert_or_assign("epoch", ckpt.at("epoch").toInt() + 1);
    ckpt.erase("epoch_finished");
    const std::string old = (dir_ / (std::string("old-") + name)).string();
    lt::atomic_pickle_save(ckpt, old);
    resume(old);
  }
}

// ckpt_path "best" and "last" for fit, validate, test and predict, in the
// Trainer that fitted (best: its ModelCheckpoint's best_model_path) and in a
// new one (best: the best model the newest checkpoint names; last: the newest
// checkpoint in the folder). Each stage runs with that file's weights; with
// no checkpoint, each names what is missing.
TEST_F(CheckpointTest, CkptPathBestAndLastInEveryStage) {
  const fs::path folder = dir_ / "ckpt";
  auto checkpoint = [](const fs::path& dirpath) {
    // The best model is the worst one (mode max), so that it is not the last.
    return std::make_shared<lt::ModelCheckpoint>(
        lt::ModelCheckpointOptions().dirpath(dirpath.string()).monitor("val_loss").mode("max").save_last(true));
  };
  struct Outcome {
    double val_loss, test_loss;
    torch::Tensor predictions;
  };
  auto run_stages = [&](lt::Trainer& t, const std::string& ckpt_path) {
    // A fresh model each time: its own initial weights never pass for the file's.
    auto model = [] { return std::make_shared<Reference>(); };
    return Outcome{t.validate(model(), data(false), ckpt_path).at("val_loss"),
                   t.test(model(), data(false), ckpt_path).at("test_loss"),
                   torch::cat(t.predict(model(), data(false), ckpt_path))};
  };
  auto with_weights_of = [&](const std::string& file) {
    auto model = std::make_shared<Reference>();
    lt::load_weights(*model, file);
    lt::Trainer t(options(1));
    return Outcome{t.validate(model, data(false)).at("val_loss"), t.test(model, data(false)).at("test_loss"),
                   torch::cat(t.predict(model, data(false)))};
  };
  auto expect_same = [](const Outcome& a, const Outcome& b, const std::string& what) {
    EXPECT_EQ(a.val_loss, b.val_loss) << what;
    EXPECT_EQ(a.test_loss, b.test_loss) << what;
    EXPECT_TRUE(torch::equal(a.predictions, b.predictions)) << what;
  };
  auto error_of = [](const std::function<void()>& stage) -> std::string {
    try {
      stage();
    } catch (const lt::ValueError& e) {
      return e.what();
    }
    return "(no error)";
  };

  // No checkpoint yet, and no ModelCheckpoint: each stage says which is missing.
  for (const char* which : {"best", "last"}) {
    lt::Trainer empty(options(1).callbacks({checkpoint(folder)}));
    lt::Trainer none(options(1));
    const std::string where = "' (the ModelCheckpoint's dirpath: ";
    const std::map<std::string, std::function<void(lt::Trainer&)>> stages = {
        {"fit", [&](lt::Trainer& t) { t.fit(std::make_shared<Reference>(), data(true), data(false), which); }},
        {"validate", [&](lt::Trainer& t) { t.validate(std::make_shared<Reference>(), data(false), which); }},
        {"test", [&](lt::Trainer& t) { t.test(std::make_shared<Reference>(), data(false), which); }},
        {"predict", [&](lt::Trainer& t) { t.predict(std::make_shared<Reference>(), data(false), which); }}};
    for (const auto& [fn, stage] : stages) {
      const std::string what = "Trainer." + fn + ": ckpt_path: " + which + ": no " + which + " checkpoint was found";
      const std::string in_folder = error_of([&] { stage(empty); });
      EXPECT_EQ(in_folder.rfind(what + " in '" + folder.string() + where, 0), 0u) << in_folder;
      const std::string no_callback = error_of([&] { stage(none); });
      EXPECT_EQ(no_callback.rfind(what + ": no ModelCheckpoint callback is configured", 0), 0u) << no_callback;
    }
  }

  torch::manual_seed(0);
  auto mc = checkpoint(folder);
  lt::Trainer fitted(options(3).callbacks({mc}));
  fitted.fit(std::make_shared<Reference>(), data(true), data(false));
  const std::string best = mc->best_model_path(), last = (folder / "last.ckpt").string();
  ASSERT_NE(fs::path(best).filename(), "last.ckpt");
  const std::map<std::string, Outcome> expected = {{"best", with_weights_of(best)}, {"last", with_weights_of(last)}};
  ASSERT_NE(expected.at("best").val_loss, expected.at("last").val_loss);
  for (const char* which : {"best", "last"}) {
    expect_same(run_stages(fitted, which), expected.at(which), std::string("the fitting Trainer, ") + which);
    lt::Trainer fresh(options(1).callbacks({checkpoint(folder)}));
    expect_same(run_stages(fresh, which), expected.at(which), std::string("a new Trainer, ") + which);
  }

  // fit resumes from them: after the best model's epoch, or epoch 2 (last);
  // max_epochs is reached there, so that nothing new is written into the folder.
  struct AtTrainStart : lt::Callback {
    std::string name() const override { return "at_train_start"; }
    void on_train_start(lt::Trainer& t, lt::LightningModule&) override { at = {t.current_epoch(), t.global_step()}; }
    std::pair<int64_t, int64_t> at{-1, -1};
  };
  const int64_t after_best = lt::pickle_load_file(best).toGenericDict().at("epoch").toInt() + 1;
  ASSERT_LT(after_best, 3);
  for (const auto& [which, epochs] : {std::pair<std::string, int64_t>{"best", after_best}, {"last", 3}}) {
    auto start = std::make_shared<AtTrainStart>();
    lt::Trainer resumed(options(epochs).callbacks({checkpoint(folder), start}));
    resumed.fit(std::make_shared<Reference>(), data(true), data(false), which);
    EXPECT_EQ(start->at, std::make_pair(epochs, epochs * 6)) << which;
  }
}

// Hyperparameters keep their types in the checkpoint (Python reads them as
// int, float, bool and str: tests/python/checkpoint_interop.py).
TEST_F(CheckpointTest, HparamsKeepTheirTypesInCheckpoints) {
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir_.string()));
  lt::Trainer trainer(options(1).callbacks({mc}));
  trainer.fit(std::make_shared<Reference>(), data(true), data(false));
  const auto hparams = lt::pickle_load_file(mc->best_model_path()).toGenericDict().at("hparams").toGenericDict();
  ASSERT_EQ(hparams.size(), 4u);
  EXPECT_TRUE(hparams.at("width").isInt() && hparams.at("width").toInt() == 8);
  EXPECT_TRUE(hparams.at("lr").isDouble() && hparams.at("lr").toDouble() == 0.01);
  EXPECT_TRUE(hparams.at("amsgrad").isBool() && !hparams.at("amsgrad").toBool());
  EXPECT_TRUE(hparams.at("name").isString() && hparams.at("name").toStringRef() == "reference");
}

TEST_F(CheckpointTest, CorruptAndForeignFilesGiveClearErrors) {
  const std::string bad = (dir_ / "bad.ckpt").string();
  std::ofstream(bad) << "not a checkpoint";
  Reference model;
  try {
    lt::load_weights(model, bad);
    FAIL();
  } catch (const lt::ValueError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("checkpoint '" + bad + "' is truncated or corrupt (16 bytes)", 0), 0u)
        << e.what();
  }
  EXPECT_THROW(lt::load_weights(model, (dir_ / "missing.ckpt").string()), lt::ValueError);
  // Atomic writes leave no temporary file behind.
  lt::atomic_pickle_save(c10::IValue(int64_t{1}), (dir_ / "x.pt").string());
  int n = 0;
  for (const auto& e : fs::directory_iterator(dir_)) n += e.path().filename().string().find(".tmp.") != std::string::npos;
  EXPECT_EQ(n, 0);
}

// A save writes the bytes LibTorch's own writer writes (torch::pickle_save:
// PyTorchStreamWriter over miniz), for values with no tensor, many tensors,
// storages shared by views, odd sizes, integer and bool dtypes, a large one; an empty
// storage goes through LibTorch's writer, the same bytes again.
// What LibTorch's own writer makes of `value` (torch::jit::writeArchiveAndTensors), pickled as lightning-cpp
// pickles it (untagged, for Python's weights_only loading).
void libtorch_archive(const c10::IValue& value, const std::function<void(const void*, size_t)>& sink) {
  std::vector<char> pickle;
  torch::jit::Pickler pickler([&](const char* d, size_t n) { pickle.insert(pickle.end(), d, d + n); }, nullptr,
                              nullptr, nullptr, nullptr, /*tag_aggregates=*/false);
  pickler.protocol();
  pickler.pushIValue(value);
  pickler.stop();
  caffe2::serialize::PyTorchStreamWriter writer([&](const void* d, size_t n) -> size_t {
    sink(d, n);
    return n;
  });
  torch::jit::writeArchiveAndTensors("data", pickle.data(), pickle.size(), pickler.tensorData(), writer);
  writer.writeEndOfFile();
}

// LibTorch 2.x's writer ends an archive with two records that 1.13's does not
// write and readers do not need (byteorder, .data/serialization_id): our
// records, all that comes before our central directory, are compared with
// the same bytes of LibTorch's archive.
bool same_records(const std::string& ours, const std::string& theirs) {
  const size_t records = ours.find(std::string("PK\x01\x02", 4));
  return records != std::string::npos && theirs.compare(0, records, ours, 0, records) == 0;
}

// Where two archives first differ, with the bytes around it (the archives themselves are too long to print).
std::string first_difference(const std::string& a, const std::string& b) {
  size_t at = 0;
  while (at < a.size() && at < b.size() && a[at] == b[at]) ++at;
  if (at == a.size() && at == b.size()) return "equal";
  const size_t from = at < 48 ? 0 : at - 48;
  std::ostringstream out;
  out << "sizes " << a.size() << " and " << b.size() << "; first difference at byte " << at << ": ...";
  c10::printQuotedString(out, a.substr(from, 96));
  out << " vs ...";
  c10::printQuotedString(out, b.substr(from, 96));
  return out.str();
}

TEST_F(CheckpointTest, ASaveWritesTheBytesOfLibTorchsWriter) {
  torch::manual_seed(3);
  c10::Dict<std::string, torch::Tensor> many;
  for (int i = 0; i < 40; ++i) many.insert("w" + std::to_string(i), torch::randn({i * 7 + 1}));
  const torch::Tensor base = torch::arange(100, torch::kFloat32);
  c10::Dict<std::string, torch::Tensor> views;
  views.insert("a", base.slice(0, 10, 30));
  views.insert("b", base.view({10, 10}).t());
  views.insert("c", torch::randint(0, 1000, {33}, torch::kLong));
  views.insert("d", torch::rand({17}) > 0.5);
  views.insert("large", torch::randn({3 << 20}));  // 12 MiB: its CRC taken on a second thread
  c10::impl::GenericDict nested(c10::StringType::get(), c10::AnyType::get());
  nested.insert("state_dict", many);
  nested.insert("epoch", int64_t{3});
  nested.insert("name", std::string(300, 'x'));
  c10::Dict<std::string, torch::Tensor> empty;
  empty.insert("e", torch::empty({0}));
  empty.insert("f", torch::ones({3}));
  const std::vector<c10::IValue> values = {c10::IValue(int64_t{1}), c10::IValue(many), c10::IValue(views),
                                           c10::IValue(nested), c10::IValue(empty)};
  for (size_t i = 0; i < values.size(); ++i) {
    const std::string path = (dir_ / ("bytes" + std::to_string(i) + ".pt")).string();
    lt::atomic_pickle_save(values[i], path);
    std::ifstream in(path, std::ios::binary);
    const std::string ours((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::string theirs;
    libtorch_archive(values[i], [&](const void* d, size_t n) { theirs.append(static_cast<const char*>(d), n); });
    EXPECT_TRUE(same_records(ours, theirs))
        << "value " << i << ": " << first_difference(ours, theirs);
#if TORCH_VERSION_MAJOR < 2
    EXPECT_EQ(ours, theirs) << "value " << i;
#endif
  }
}

// A record of 4 GiB or more, and the records after it (past 4 GiB), carry
// miniz's zip64 fields: the archive of a 4 GiB + 100 byte tensor between two
// small ones is, byte for byte, what LibTorch's writer writes. Compared
// without the large record's bytes (zeros of a mapping that takes no memory;
// their CRC is in the compared bytes), so that the test holds no 4 GiB.
TEST_F(CheckpointTest, ARecordOf4GiBHasMinizsZip64FieldsAndBytes) {
  const size_t big = (size_t{1} << 32) + 100;
  void* zeros = ::mmap(nullptr, big, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  ASSERT_NE(zeros, MAP_FAILED);
  const char* begin = static_cast<const char*>(zeros);
  c10::Dict<std::string, torch::Tensor> value;
  value.insert("a", torch::arange(3, torch::kFloat32));
  value.insert("big", torch::from_blob(zeros, {static_cast<int64_t>(big)}, torch::kUInt8));
  value.insert("c", torch::arange(5, torch::kLong));
  struct Kept {
    std::string bytes;  // all but the large record's
    uint64_t total = 0;
  };
  auto keep = [begin, big](Kept* kept) {
    return [kept, begin, big](const void* data, size_t size) {
      const char* p = static_cast<const char*>(data);
      if (p < begin || p >= begin + big) kept->bytes.append(p, size);
      kept->total += size;
    };
  };
  Kept ours, theirs;
  lt::write_pickle_archive(value, keep(&ours));
  libtorch_archive(value, keep(&theirs));
  ::munmap(zeros, big);
  EXPECT_GT(ours.total, big);
  EXPECT_TRUE(same_records(ours.bytes, theirs.bytes))
      << first_difference(ours.bytes, theirs.bytes);
#if TORCH_VERSION_MAJOR < 2
  EXPECT_EQ(ours.total, theirs.total);
  EXPECT_EQ(ours.bytes, theirs.bytes);
#endif
}

// A checkpoint's placeholders (a sharding strategy's tensors held in chunks)
// are written as their values arrive: the file reads back as the dict with
// the values, in C++ and with Python's torch.load. A placeholder given no
// value is an error and leaves the old file; a failing write is thrown only
// once every value was handed over (the handing over is a collective).
TEST_F(CheckpointTest, PlaceholdersAreWrittenAsTheirValuesArrive) {
  torch::manual_seed(0);
  const torch::Tensor x = torch::randn({3, 4}), z = torch::arange(5, torch::kLong);
  const torch::Tensor px = lt::deferred_tensor({3, 4}, torch::kFloat32), pz = lt::deferred_tensor({5}, torch::kLong);
  EXPECT_TRUE(lt::is_deferred(px) && lt::is_deferred(pz));
  EXPECT_FALSE(lt::is_deferred(x));
  EXPECT_FALSE(lt::is_deferred(lt::deferred_tensor({0, 4}, torch::kFloat32)));  // nothing to defer
  c10::Dict<std::string, torch::Tensor> state;
  state.insert("x", px);
  state.insert("y", torch::ones({2}));
  state.insert("z", pz);
  const std::string path = (dir_ / "deferred.pt").string();
  int calls = 0;
  lt::atomic_pickle_save(state, path, [&](const lt::DeferredWrite& write) {
    ++calls;
    write(pz, z);
    write(px, x);
  });
  EXPECT_EQ(calls, 1);
  const auto loaded = lt::pickle_load_file(path).toGenericDict();
  EXPECT_TRUE(loaded.at("x").toTensor().equal(x));
  EXPECT_TRUE(loaded.at("y").toTensor().equal(torch::ones({2})));
  EXPECT_TRUE(loaded.at("z").toTensor().equal(z));
  const std::string python = std::string(kPython) +
                             " -c \"import torch, sys; d = torch.load(sys.argv[1]); "
                             "assert list(d) == ['x', 'y', 'z'] and d['x'].shape == (3, 4) and "
                             "d['z'].tolist() == [0, 1, 2, 3, 4], d\" " + path;
  EXPECT_EQ(std::system(python.c_str()), 0) << python;
  const std::string before = read_file(path);
  EXPECT_THROW(lt::atomic_pickle_save(state, path, [&](const lt::DeferredWrite& write) { write(pz, z); }), lt::Error);
  EXPECT_EQ(read_file(path), before);
  int handed = 0;
  auto failing = [&](const void* data, size_t /*size*/) {  // fails at x's bytes, after z's record
    if (data == x.data_ptr()) throw std::runtime_error("disk full");
  };
  try {
    lt::write_pickle_archive(state, failing, [&](const lt::DeferredWrite& write) {
      write(pz, z);
      ++handed;
      write(px, x);
      ++handed;
    });
    ADD_FAILURE() << "the failing write was not thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_STREQ(e.what(), "disk full");
  }
  EXPECT_EQ(handed, 2);
}

// A load maps the file: its tensors are copy-on-write views of the file's
// pages (shared, and dropped by the kernel under pressure), not the
// process's own memory. Loading a 64 MB checkpoint adds far less than that
// to the process's own (anonymous) memory while it is held; a loaded tensor
// changed in place changes neither the file nor a second load of it.
TEST_F(CheckpointTest, ALoadMapsTheFileCopyOnWrite) {
  auto status_kb = [](const std::string& key) {
    std::ifstream status("/proc/self/status");
    std::string line;
    while (std::getline(status, line)) {
      if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
    }
    return 0LL;
  };
  torch::manual_seed(1);
  c10::Dict<std::string, torch::Tensor> state;
  for (int i = 0; i < 4; ++i) state.insert("w" + std::to_string(i), torch::randn({4 << 20}));  // 16 MB each
  const std::string path = (dir_ / "mapped.pt").string();
  lt::atomic_pickle_save(state, path);
  const std::string bytes = read_file(path);
  const long long before = status_kb("RssAnon");
  c10::IValue loaded = lt::pickle_load_file(path);
  const long long added = status_kb("RssAnon") - before;
  EXPECT_LT(added, 16 * 1024) << "kB of the process's own memory for a 64 MB checkpoint";
  torch::Tensor w0 = loaded.toGenericDict().at("w0").toTensor();
  EXPECT_TRUE(w0.equal(state.at("w0")));
  w0.add_(1);
  EXPECT_EQ(read_file(path), bytes);
  EXPECT_TRUE(lt::pickle_load_file(path).toGenericDict().at("w0").toTensor().equal(state.at("w0")));
}

// A sharded checkpoint (checkpoint_io.h), made of its pieces in one process
// as two ranks would: each placeholder's value is read from the rank files
// (w: split across both ranks' part 0; v: inside rank 1's part 1), the rank
// files are tuples torch.load reads, a save killed before its meta.pt leaves
// the previous checkpoint whole and the next save removes its stray files,
// and a missing or damaged rank file is an error naming it.
TEST_F(CheckpointTest, AShardedCheckpointReadsItsPlaceholdersFromItsRankFilesAndIsReplacedWhole) {
  const std::string dir = (dir_ / "sharded.ckpt").string();
  fs::create_directories(dir);
  const torch::Tensor w = torch::arange(15, torch::kFloat).view({3, 5}), v = torch::tensor({7, 8, 9}, torch::kLong);
  const torch::Tensor pw = lt::deferred_tensor({3, 5}, torch::kFloat), pv = lt::deferred_tensor({3}, torch::kLong);
  c10::Dict<std::string, torch::Tensor> weights;
  weights.insert("w", pw);
  weights.insert("b", torch::ones({2}));
  c10::impl::GenericDict checkpoint(c10::StringType::get(), c10::AnyType::get());
  checkpoint.insert("state_dict", weights);
  checkpoint.insert("v", pv);
  checkpoint.insert("global_step", int64_t{7});
  // Rank r's parts: w's flat values (padded to 16) in halves; v at element 1 of rank 1's part 1.
  auto save = [&](uint64_t token, const torch::Tensor& flat_w, const torch::Tensor& part1, bool meta) {
    std::vector<std::string> files;
    for (int64_t r = 0; r < 2; ++r) {
      files.push_back(lt::shard_file_name(r, 2, token));
      std::vector<c10::IValue> parts{flat_w.narrow(0, 8 * r, 8).clone(), r == 1 ? part1 : torch::zeros({2}, torch::kLong)};
      lt::atomic_pickle_save(c10::ivalue::Tuple::create(std::move(parts)), dir + "/" + files.back());
    }
    if (meta) lt::write_sharded_meta(checkpoint, dir, files, {{pw, 0, 0}, {pv, 1, 3}});
    return files;
  };
  auto loaded = [&] { return lt::pickle_load_file(dir).toGenericDict(); };
  const torch::Tensor flat = torch::cat({w.flatten(), torch::zeros({1})});
  const auto files = save(1, flat, torch::tensor({0, 7, 8, 9}, torch::kLong), /*meta=*/true);
  ASSERT_TRUE(lt::is_sharded_checkpoint(dir));
  EXPECT_FALSE(lt::is_sharded_checkpoint((dir_ / "no").string()));
  lt::check_checkpoint_file(dir);
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("w").toTensor().equal(w));
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("b").toTensor().equal(torch::ones({2})));
  EXPECT_TRUE(loaded().at("v").toTensor().equal(v));
  EXPECT_EQ(loaded().at("global_step").toInt(), 7);
  // Read with placeholders (a sharding strategy's load): the values stay in the rank files, and any range of
  // one is read from them (w's elements 6-9 span both files).
  {
    const auto lazy = lt::pickle_load_file(dir, /*placeholders=*/true).toGenericDict();
    const torch::Tensor lw = lazy.at("state_dict").toGenericDict().at("w").toTensor();
    ASSERT_TRUE(lt::is_deferred(lw));
    EXPECT_FALSE(lt::is_deferred(lazy.at("state_dict").toGenericDict().at("b").toTensor()));
    torch::Tensor range = torch::zeros({4}, torch::kDouble);  // cast on the way
    lt::copy_elements(lw, 6, range);
    EXPECT_TRUE(range.equal(torch::arange(6, 10, torch::kDouble)));
    EXPECT_TRUE(lt::materialized(lw).equal(w));
    EXPECT_TRUE(lt::materialized(lazy.at("v").toTensor()).equal(v));
  }
  const std::string python = std::string(kPython) +
                             " -c \"import torch, sys; t = torch.load(sys.argv[1]); "
                             "assert isinstance(t, tuple) and t[0].tolist() == list(range(8)), t\" " + dir + "/" +
                             files[0];
  EXPECT_EQ(std::system(python.c_str()), 0) << python;
  // Killed after the rank files, before meta.pt: the old checkpoint.
  save(2, flat + 100, torch::tensor({0, 1, 2, 3}, torch::kLong), /*meta=*/false);
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("w").toTensor().equal(w));
  const auto next = save(3, flat + 100, torch::tensor({0, 1, 2, 3}, torch::kLong), /*meta=*/true);
  EXPECT_TRUE(loaded().at("state_dict").toGenericDict().at("w").toTensor().equal(w + 100));
  EXPECT_TRUE(loaded().at("v").toTensor().equal(torch::tensor({1, 2, 3}, torch::kLong)));
  std::vector<std::string> left;
  for (const auto& entry : fs::directory_iterator(dir)) left.push_back(entry.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"meta.pt", next[0], next[1]}));
  // A damaged rank file (a byte of its first record's data, 64-byte aligned: at 64), then a missing one.
  {
    std::fstream f(dir + "/" + next[1], std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(65);
    const char byte = static_cast<char>(f.get());
    f.seekp(65);
    f.put(static_cast<char>(byte ^ 0x5a));
  }
  try {
    lt::check_checkpoint_file(dir);
    ADD_FAILURE() << "a damaged rank file passed the check";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find(next[1]), std::string::npos) << e.what();
  }
  fs::remove(dir + "/" + next[1]);
  try {
    loaded();
    ADD_FAILURE() << "a missing rank file was not noticed";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("names the file '" + next[1] + "', which is missing"), std::string::npos)
        << e.what();
  }
}

// -- hostile file systems (hardening) ---------------------------------------------

}  // namespace

// -- a checkpoint of the other LibTorch (1.13 <-> 2.x) --------------------------------------------
// tests/compat/libtorch113.sh runs WriteForTheOtherLibTorch under both builds
// into one folder (LT_CROSS_DIR), then ResumeTheOtherLibTorchsCheckpoint under
// both: each resumes the other's mid-epoch checkpoint and must end where its
// own uninterrupted run ends. Weights and data come from formulas, not a
// generator, so both builds start alike; the first steps were the other
// LibTorch's arithmetic, so the weights agree to 1e-5, not bitwise (a resume
// that lost Adam's moments, the step or the scheduler lands 1e-3 away or more).
namespace {

class Formula : public lt::LightningModule {
 public:
  Formula() {
    fc1_ = register_module("fc1", torch::nn::Linear(4, 8));
    fc2_ = register_module("fc2", torch::nn::Linear(8, 2));
    torch::NoGradGuard no_grad;
    for (auto& p : parameters()) {
      p.copy_(torch::sin(torch::arange(p.numel(), torch::kFloat) * 0.37 + p.numel()).reshape(p.sizes()) * 0.3);
    }
  }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override {
    return torch::mse_loss(fc2_(torch::tanh(fc1_(b.data))), b.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    auto opt = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(0.01));
    return lt::OptimizerConfig(opt, std::make_shared<lt::StepLR>(*opt, 1, 0.7), lt::Interval::kEpoch);
  }

 private:
  torch::nn::Linear fc1_{nullptr}, fc2_{nullptr};
};

std::shared_ptr<lt::DataLoader> formula_data() {
  auto x = torch::sin(torch::arange(48 * 4, torch::kFloat) * 0.11).reshape({48, 4});
  auto y = torch::stack({x.sum(1), x.select(1, 0) - x.select(1, 2)}, 1);
  return std::make_shared<lt::DataLoader>(std::make_shared<lt::TensorDataset>(x, y),
                                          lt::DataLoaderOptions(8).shuffle(true).seed(5));
}

const std::string kThisLibTorch = "libtorch-" + std::to_string(TORCH_VERSION_MAJOR) + "." +
                                  std::to_string(TORCH_VERSION_MINOR);

}  // namespace

TEST_F(CheckpointTest, WriteForTheOtherLibTorch) {
  const char* cross = std::getenv("LT_CROSS_DIR");
  if (cross == nullptr) GTEST_SKIP() << "run by tests/compat/libtorch113.sh (LT_CROSS_DIR)";
  auto every = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions()
      .dirpath((fs::path(cross) / kThisLibTorch).string()).every_n_train_steps(4).save_top_k(-1));
  lt::Trainer trainer(options(2).callbacks({every}).enable_progress_bar(false));
  trainer.fit(std::make_shared<Formula>(), formula_data());
  ASSERT_TRUE(fs::exists(fs::path(cross) / kThisLibTorch / "epoch=0-step=4.ckpt"));
}

TEST_F(CheckpointTest, ResumeTheOtherLibTorchsCheckpoint) {
  const char* cross = std::getenv("LT_CROSS_DIR");
  if (cross == nullptr) GTEST_SKIP() << "run by tests/compat/libtorch113.sh (LT_CROSS_DIR)";
  auto straight = std::make_shared<Formula>();
  lt::Trainer a(options(2).enable_progress_bar(false));
  a.fit(straight, formula_data());
  int resumed_count = 0;
  for (const auto& entry : fs::directory_iterator(cross)) {
    if (entry.path().filename() == kThisLibTorch) continue;
    const std::string path = (entry.path() / "epoch=0-step=4.ckpt").string();
    ASSERT_TRUE(fs::exists(path)) << path;
    auto resumed = std::make_shared<Formula>();
    lt::Trainer b(options(2).enable_progress_bar(false));
    b.fit(resumed, formula_data(), lt::FitOptions().ckpt_path(path));
    EXPECT_EQ(b.global_step(), a.global_step()) << path;
    auto sa = lt::module_state_dict(*straight), sb = lt::module_state_dict(*resumed);
    for (const auto& kv : sa) {
      const double diff = (kv.value() - sb.at(kv.key())).abs().max().item<double>();
      EXPECT_LT(diff, 1e-5) << kThisLibTorch << " resuming " << path << ": " << kv.key();
    }
    ++resumed_count;
  }
  EXPECT_GE(resumed_count, 1) << "no checkpoint of another LibTorch in " << cross;
}
