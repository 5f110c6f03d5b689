#include <lightning_cpp/callbacks/device_stats_monitor.h>

#include <unistd.h>

#include <chrono>
#include <fstream>
#include <sstream>

#include <lightning_cpp/core/check.h>
#include <lightning_cpp/core/torch_compat.h>
#include <lightning_cpp/trainer/trainer.h>

namespace lt {

namespace {

// /proc/stat's first line: the host's CPU time in clock ticks, busy and in all.
std::pair<double, double> host_cpu_ticks() {
  std::ifstream in("/proc/stat");
  std::string cpu;
  double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
  in >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
  const double total = user + nice + system + idle + iowait + irq + softirq + steal;
  return {total - idle - iowait, total};
}

// This process's CPU time (user and system) in seconds: /proc/self/stat's fields 14 and 15.
double process_cpu_seconds() {
  std::ifstream in("/proc/self/stat");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  // The command name (field 2) is in parentheses and may hold spaces: count from its end.
  const size_t close = text.rfind(')');
  if (close == std::string::npos) return 0;
  std::istringstream fields(text.substr(close + 2));
  std::string field;
  double utime = 0, stime = 0;
  for (int i = 3; i <= 15 && fields >> field; ++i) {
    if (i == 14) utime = std::stod(field);
    if (i == 15) stime = std::stod(field);
  }
  return (utime + stime) / static_cast<double>(::sysconf(_SC_CLK_TCK));
}

// Values in kB of a /proc file of "Key:   value kB" lines, as bytes.
std::map<std::string, double> proc_kb(const char* path) {
  std::map<std::string, double> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const size_t colon = line.find(':');
    if (colon == std::string::npos || line.find(" kB") == std::string::npos) continue;
    out[line.substr(0, colon)] = std::stod(line.substr(colon + 1)) * 1024.0;
  }
  return out;
}

double wall_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double percent(double part, double whole) { return whole > 0 ? 100.0 * part / whole : 0.0; }

}  // namespace

CpuStats::CpuStats() {
  std::tie(host_busy_, host_total_) = host_cpu_ticks();
  process_cpu_ = process_cpu_seconds();
  wall_ = wall_seconds();
}

std::map<std::string, double> CpuStats::sample() {
  std::map<std::string, double> out;
  const auto [busy, total] = host_cpu_ticks();
  out["cpu_percent"] = percent(busy - host_busy_, total - host_total_);
  host_busy_ = busy;
  host_total_ = total;
  const double cpu = process_cpu_seconds(), wall = wall_seconds();
  out["process_cpu_percent"] = percent(cpu - process_cpu_, wall - wall_);
  process_cpu_ = cpu;
  wall_ = wall;

  const std::map<std::string, double> memory = proc_kb("/proc/meminfo");
  const auto get = [](const std::map<std::string, double>& m, const char* key) {
    const auto it = m.find(key);
    return it == m.end() ? 0.0 : it->second;
  };
  const double mem_total = get(memory, "MemTotal");
  out["cpu_vm_percent"] = percent(mem_total - get(memory, "MemAvailable"), mem_total);
  const double swap_total = get(memory, "SwapTotal");
  out["cpu_swap_percent"] = percent(swap_total - get(memory, "SwapFree"), swap_total);
  const std::map<std::string, double> status = proc_kb("/proc/self/status");
  out["process_rss_bytes"] = get(status, "VmRSS");
  out["process_peak_rss_bytes"] = get(status, "VmHWM");
  return out;
}

DeviceStatsMonitor::DeviceStatsMonitor(DeviceStatsMonitorOptions options) : options_(std::move(options)) {}

void DeviceStatsMonitor::log(Trainer& trainer, const char* hook) {
  const torch::Device device = trainer.strategy().root_device();
  std::map<std::string, double> stats = compat::accelerator_memory_stats(device);
  if (options_.cpu_stats().value_or(device.is_cpu())) stats.merge(cpu_.sample());
  last_.clear();
  if (stats.empty()) return;
  const std::string prefix = c10::str(name(), ".", hook, "/");
  for (const auto& [key, value] : stats) last_[prefix + key] = value;
  if (trainer.logger() != nullptr && trainer.is_global_zero()) {
    trainer.logger()->log_metrics(last_, trainer.global_step());
  }
}

// A batch's stats are logged when its optimizer step is a logging step (every log_every_n_steps).
void DeviceStatsMonitor::on_train_batch_start(Trainer& trainer, LightningModule& /*module*/, const Batch& /*batch*/,
                                              int64_t /*batch_idx*/) {
  log_this_batch_ = (trainer.global_step() + 1) % trainer.options().log_every_n_steps() == 0;
  if (log_this_batch_) log(trainer, "on_train_batch_start");
}

void DeviceStatsMonitor::on_train_batch_end(Trainer& trainer, LightningModule& /*module*/,
                                            const torch::Tensor& /*loss*/, const Batch& /*batch*/,
                                            int64_t /*batch_idx*/) {
  if (log_this_batch_) log(trainer, "on_train_batch_end");
}

}  // namespace lt
