#pragma once
// What the distributed benchmarks share: running copies of the benchmark as
// the ranks of one job on 127.0.0.1, and timing a Trainer's steps.

#include <chrono>
#include <cstdint>
#include <iostream>
#include <map>
#include <string>
#include <vector>

#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt::bench {

// Runs `world` copies of this program with RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, MASTER_ADDR and MASTER_PORT set and `env` added; true
// when every rank exits 0 (else says which did not, as `who`).
inline bool run_ranks(int world, const std::map<std::string, std::string>& env, const std::string& who,
                      std::chrono::minutes limit = std::chrono::minutes(10)) {
  const std::string port = std::to_string(lt::find_free_port());
  std::vector<lt::WorkerSpec> specs;
  for (int r = 0; r < world; ++r) {
    lt::WorkerSpec spec;
    spec.argv = lt::self_argv();
    spec.env = {{"RANK", std::to_string(r)},        {"LOCAL_RANK", std::to_string(r)},
                {"WORLD_SIZE", std::to_string(world)}, {"LOCAL_WORLD_SIZE", std::to_string(world)},
                {"MASTER_ADDR", "127.0.0.1"},       {"MASTER_PORT", port}};
    for (const auto& [key, value] : env) spec.env[key] = value;
    specs.push_back(std::move(spec));
  }
  const auto exits = lt::launch_and_wait(specs, lt::LaunchOptions{limit});
  for (size_t r = 0; r < exits.size(); ++r) {
    if (!exits[r].ok()) {
      std::cerr << who << ": rank " << r << " " << exits[r].describe() << "\n";
      return false;
    }
  }
  return true;
}

// Steps/s of a Trainer's run, from the batch after `warmup` steps to the end of training.
class StepTimer : public lt::Callback {
 public:
  explicit StepTimer(int64_t warmup) : warmup_(warmup) {}
  std::string name() const override { return "StepTimer"; }
  void on_train_batch_start(lt::Trainer& trainer, lt::LightningModule&, const lt::Batch&, int64_t) override {
    if (trainer.global_step() == warmup_ && !started_) {
      started_ = true;
      t0_ = std::chrono::steady_clock::now();
    }
  }
  void on_train_end(lt::Trainer& trainer, lt::LightningModule&) override {
    sps_ = static_cast<double>(trainer.global_step() - warmup_) /
           std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
  }
  double steps_per_s() const { return sps_; }

 private:
  int64_t warmup_;
  bool started_ = false;
  std::chrono::steady_clock::time_point t0_;
  double sps_ = 0;
};

}  // namespace lt::bench
