#pragma once
// What the torchrun_test binary's files share: the real torchrun of the
// LibTorch built against (LT_TORCHRUN), launchers run side by side, and the
// oracle every run is held to: the weights of the local spawn (devices: 2)
// with the same data (the TorchrunFit worker, plugins/environments/torchrun_test.cpp).
#include <unistd.h>

#include <chrono>
#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include <gtest/gtest.h>
#include <torch/torch.h>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/plugins/launchers/subprocess_script.h>

#include "support/multiprocess.h"

namespace lt::testing {

inline constexpr const char* kTorchrun = LT_TORCHRUN;  // the torchrun of the LibTorch built against

inline std::string fresh_dir(const std::string& name) {
  auto dir = std::filesystem::temp_directory_path() / ("lt_torchrun_" + std::to_string(::getpid()) + "_" + name);
  std::filesystem::remove_all(dir);
  std::filesystem::create_directories(dir);
  return dir.string();
}

// Runs the commands (each a whole launcher: torchrun, or this binary as a
// supervisor) side by side; true when all exit 0, else a report in `why`.
inline bool run_launchers(const std::string& dir, const std::vector<std::vector<std::string>>& commands,
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

inline std::vector<torch::Tensor> load_params(const std::string& path) {
  std::vector<torch::Tensor> t;
  torch::load(t, path);
  return t;
}

// The local spawn's weights, computed once.
inline const std::vector<torch::Tensor>& reference() {
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

inline std::vector<std::string> torchrun(std::vector<std::string> args) {
  // Python 3.11's torchrun needs nonzero --redirects and --tee ('NoneType' object has no attribute 'get').
  std::vector<std::string> out = {kTorchrun, "--no_python", "-r", "2", "-t", "2"};
  out.insert(out.end(), args.begin(), args.end());
  out.push_back(lt::self_executable());
  return out;
}

// Every rank of the run in `dir` ended with the local spawn's weights.
inline void expect_reference_weights(const std::string& dir) {
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

}  // namespace lt::testing

// One type for every file's TEST_F(Torchrun, ...): gtest requires a test suite's tests to share their fixture
// class.
class Torchrun : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!std::filesystem::exists(lt::testing::kTorchrun)) {
      GTEST_SKIP() << lt::testing::kTorchrun << " is not installed (scripts/install-deps.sh)";
    }
  }
};
