#pragma once
// What the distributed benchmarks share: running copies of the benchmark as
// the ranks of one job on 127.0.0.1, and timing a Trainer's steps.

#include <sys/resource.h>

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

// CPU seconds the calling thread has used: a training loop's own work, without
// Gloo's threads and without the time it waits (blocked) on the other ranks.
inline double thread_cpu_seconds() {
  rusage usage{};
  ::getrusage(RUSAGE_THREAD, &usage);
  return static_cast<double>(usage.ru_utime.tv_sec + usage.ru_stime.tv_sec) +
         static_cast<double>(usage.ru_utime.tv_usec + usage.ru_stime.tv_usec) / 1e6;
}

// Steps/s of a Trainer's run, from the batch after `warmup` steps to the end
// of training, and the loop thread's CPU milliseconds per step.
class StepTimer : public lt::Callback {
 public:
  explicit StepTimer(int64_t warmup) : warmup_(warmup) {}
  std::string name() const override { return "StepTimer"; }
  void on_train_batch_start(lt::Trainer& trainer, lt::LightningModule&, const lt::Batch&, int64_t) override {
    if (trainer.global_step() == warmup_ && !started_) {
      started_ = true;
      t0_ = std::chrono::steady_clock::now();
      cpu0_ = thread_cpu_seconds();
    }
  }
  void on_train_end(lt::Trainer& trainer, lt::LightningModule&) override {
    const double steps = static_cast<double>(trainer.global_step() - warmup_);
    sps_ = steps / std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
    cpu_ms_ = (thread_cpu_seconds() - cpu0_) * 1000 / steps;
  }
  double steps_per_s() const { return sps_; }
  double cpu_ms_per_step() const { return cpu_ms_; }

 private:
  int64_t warmup_;
  bool started_ = false;
  std::chrono::steady_clock::time_point t0_;
  double cpu0_ = 0;
  double sps_ = 0;
  double cpu_ms_ = 0;
};

}  // namespace lt::bench
