// core/optimizer_state.h: the optimizer's state in a checkpoint is
// PyTorch's optimizer.state_dict(), both ways; the oracle is Python's Adam
// (the Python of the LibTorch built against, tests/python/checkpoint_interop.py).
#include <string>

#include <gtest/gtest.h>
#include <torch/version.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/core/optimizer_state.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/checkpoint_fixture.h"
#include "support/multiprocess.h"

using lt::testing::read_file;
using namespace lt::testing;  // kPython, Reference, data, expect_same_weights (support/checkpoint_fixture.h)

namespace fs = std::filesystem;

namespace {

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
  const c10::IValue saved_adam = saved.at("optimizer_states").toListRef()[0];
  lt::load_optimizer_state_dict(adam, saved_adam, "last.ckpt optimizer");
  EXPECT_DOUBLE_EQ(adam.param_groups()[0].options().get_lr(), 0.01 * 0.7 * 0.7);
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
    lt::load_optimizer_state_dict(sgd, saved_adam, "last.ckpt optimizer");
    FAIL() << "Adam's state loaded into SGD";
  } catch (const lt::ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("last.ckpt optimizer.state[0] has 'step'"), std::string::npos) << e.what();
  }
  EXPECT_DOUBLE_EQ(sgd.param_groups()[0].options().get_lr(), 0.5);
  EXPECT_TRUE(sgd.state().empty());
}

}  // namespace
