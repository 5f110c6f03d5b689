// core/state_dict.h and the checkpoint files it reads, against PyTorch (the
// Python of the LibTorch built against, tests/python/checkpoint_interop.py):
// Python reads what C++ writes (names and values), C++ loads a state_dict
// Python saved, hyperparameters keep their types, and corrupt or foreign
// files give clear errors.
#include <algorithm>
#include <fstream>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/model_checkpoint.h>
#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/checkpoint_io.h>
#include <lightning_cpp/trainer/trainer.h>

#include "support/checkpoint_fixture.h"
#include "support/multiprocess.h"

using lt::testing::read_file;
using namespace lt::testing;  // kPython, Reference, data, expect_same_weights (support/checkpoint_fixture.h)

namespace fs = std::filesystem;

namespace {

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
  // Written from a GPU (its tensors placed on cuda:0): read onto the CPU, as torch.load(map_location="cpu").
  Reference from_gpu;
  lt::load_weights(from_gpu, state + ".cuda");
  from_gpu.eval();
  EXPECT_TRUE(torch::allclose(from_gpu.forward(expected.at("input").toTensor()), expected.at("output").toTensor(),
                              1e-6, 1e-6));
  // An OrderedDict with its _metadata (torch.save(model.state_dict())), which
  // LibTorch's unpickler does not read: the reader rewrites it (plugins/io/pickle_opcodes.h).
  // (1.13's unpickler also lacks SETITEM and APPEND, which Python writes for one-item dicts and lists.)
#if TORCH_VERSION_MAJOR >= 2
  Reference ordered;
  lt::load_weights(ordered, state + ".ordered");
  ordered.eval();
  EXPECT_TRUE(torch::allclose(ordered.forward(expected.at("input").toTensor()), expected.at("output").toTensor(),
                              1e-6, 1e-6));
#endif
  // A missing or unexpected key is refused in strict mode.
  lt::LightningModule* m = &model;
  auto partial = lt::module_state_dict(*m);
  ASSERT_EQ(partial.erase("head.bias"), 1u);
  EXPECT_THROW(lt::load_module_state_dict(model, partial), lt::ValueError);
}

// Hyperparameters keep their types in the checkpoint (Python reads them as
// int, float, bool and str: tests/python/checkpoint_interop.py).
TEST_F(CheckpointTest, HparamsKeepTheirTypesInCheckpoints) {
  auto mc = std::make_shared<lt::ModelCheckpoint>(lt::ModelCheckpointOptions().dirpath(dir_.string()));
  lt::Trainer trainer(options(1).callbacks({mc}));
  trainer.fit(std::make_shared<Reference>(), data(true), data(false));
  const auto hparams = lt::pickle_load_file(mc->best_model_path()).toGenericDict().at("hyper_parameters").toGenericDict();
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

}  // namespace
