// callbacks/device_stats_monitor.h: at the start and end of the batches whose
// step is a logging step, the host's and the process's CPU and memory under
// Lightning's keys; the process's peak memory agrees with getrusage's (an
// independent reading, within 1%), and a batch that keeps the CPU busy shows in the
// process's CPU share.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <gtest/gtest.h>

#include <lightning_cpp/callbacks/device_stats_monitor.h>
#include <lightning_cpp/core/logger.h>
#include <lightning_cpp/trainer/trainer.h>

#include "callbacks/callbacks_fixture.h"

using namespace lt::testing;  // ScriptedModule, loader (callbacks/callbacks_fixture.h)

namespace {

class StatsLogger : public lt::Logger {
 public:
  std::string name() const override { return "stats"; }
  void log_metrics(const std::map<std::string, double>& metrics, int64_t step) override {
    const bool monitors = std::any_of(metrics.begin(), metrics.end(),
                                      [](const auto& m) { return m.first.rfind("DeviceStatsMonitor.", 0) == 0; });
    if (monitors) rows.emplace_back(step, metrics);
  }
  std::vector<std::pair<int64_t, std::map<std::string, double>>> rows;  // the monitor's
};

// Each training step spins the CPU for 30 ms of this thread's CPU time.
class BusyModule : public ScriptedModule {
 public:
  BusyModule() : ScriptedModule({1.0}) {}
  torch::Tensor training_step(const lt::Batch& b, int64_t i) override {
    const auto cpu = [] {
      timespec t{};
      clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
      return static_cast<double>(t.tv_sec) + 1e-9 * static_cast<double>(t.tv_nsec);
    };
    const double start = cpu();
    volatile double sink = 0;
    while (cpu() - start < 0.03) sink = sink + 1;
    return ScriptedModule::training_step(b, i);
  }
};

}  // namespace

TEST_F(CallbacksTest, DeviceStatsMonitorLogsCpuAndMemoryAtLoggingSteps) {
  auto logger = std::make_shared<StatsLogger>();
  auto monitor = std::make_shared<lt::DeviceStatsMonitor>();
  lt::Trainer trainer(options(1).callbacks({monitor}).logger(logger).log_every_n_steps(2));
  trainer.fit(std::make_shared<BusyModule>(), loader(12, 2));  // 6 steps
  rusage usage{};
  ASSERT_EQ(getrusage(RUSAGE_SELF, &usage), 0);
  const double peak_now = static_cast<double>(usage.ru_maxrss) * 1024.0;

  std::vector<std::pair<int64_t, std::string>> seen;
  const std::string start = "DeviceStatsMonitor.on_train_batch_start/", end = "DeviceStatsMonitor.on_train_batch_end/";
  for (const auto& [step, m] : logger->rows) {
    const bool at_start = m.count(start + "cpu_percent") == 1;
    const std::string& prefix = at_start ? start : end;
    ASSERT_EQ(m.size(), 6u) << "the CPU stats of one hook per row";
    seen.emplace_back(step, at_start ? "start" : "end");
    for (const char* percent : {"cpu_percent", "cpu_vm_percent", "cpu_swap_percent"}) {
      EXPECT_GE(m.at(prefix + percent), 0.0) << percent;
      EXPECT_LE(m.at(prefix + percent), 100.0) << percent;
    }
    const double rss = m.at(prefix + "process_rss_bytes"), peak = m.at(prefix + "process_peak_rss_bytes");
    EXPECT_GT(rss, 1e6);
    EXPECT_GE(peak, rss);
    // VmHWM and ru_maxrss are the kernel's two counts of the peak: equal within a few hundred kB.
    EXPECT_LE(peak, 1.01 * peak_now) << "above getrusage's peak, read after the run";
    EXPECT_GT(peak, 0.5 * peak_now);
    // A batch end's share covers the batch: 30 ms of CPU on this thread.
    if (!at_start) EXPECT_GT(m.at(prefix + "process_cpu_percent"), 10.0);
  }
  // Steps 2, 4 and 6 log (log_every_n_steps 2): the batches that take them, at
  // their start (global_step 1, 3, 5) and end (2, 4, 6).
  EXPECT_EQ(seen, (std::vector<std::pair<int64_t, std::string>>{
                      {1, "start"}, {2, "end"}, {3, "start"}, {4, "end"}, {5, "start"}, {6, "end"}}));
  EXPECT_EQ(monitor->last_stats().size(), 6u);
  // cpu_stats: false on the CPU: nothing to log (no accelerator's memory either).
  auto quiet = std::make_shared<lt::DeviceStatsMonitor>(lt::DeviceStatsMonitorOptions().cpu_stats(false));
  auto none = std::make_shared<StatsLogger>();
  lt::Trainer(options(1).callbacks({quiet}).logger(none)).fit(std::make_shared<BusyModule>(), loader(4, 2));
  EXPECT_TRUE(none->rows.empty());
}
