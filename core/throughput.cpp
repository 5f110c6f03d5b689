#include <lightning_cpp/core/throughput.h>

#include <algorithm>
#include <chrono>
#include <set>
#include <string>

#include <torch/csrc/autograd/profiler_legacy.h>
#include <torch/cuda.h>

#include <lightning_cpp/core/check.h>

namespace lt {

Throughput::Throughput(int64_t window_size) : window_size_(window_size) {
  LT_CHECK_VALUE(window_size >= 2, "Throughput: window_size must be >= 2 (a rate needs two records), got ",
                 window_size);
}

void Throughput::update(const ThroughputRecord& r) {
  if (!records_.empty()) {
    const ThroughputRecord& last = records_.back();
    const auto check = [](double now, double before, const char* field) {
      LT_CHECK_VALUE(now >= before, "Throughput::update: ", field, " went back from ", before, " to ", now,
                     " (records are cumulative)");
    };
    check(r.time, last.time, "time");
    check(r.batches, last.batches, "batches");
    check(r.samples, last.samples, "samples");
    check(r.lengths, last.lengths, "lengths");
    check(r.flops, last.flops, "flops");
  }
  records_.push_back(r);
  if (static_cast<int64_t>(records_.size()) > window_size_) records_.pop_front();
}

std::optional<ThroughputRecord> Throughput::window() const {
  if (records_.size() < 2) return std::nullopt;
  const ThroughputRecord &a = records_.front(), &b = records_.back();
  return ThroughputRecord{b.time - a.time, b.batches - a.batches, b.samples - a.samples, b.lengths - a.lengths,
                          b.flops - a.flops};
}

ThroughputRecord Throughput::totals() const { return records_.empty() ? ThroughputRecord{} : records_.back(); }

std::map<std::string, double> throughput_rates(const ThroughputRecord& w, const std::string& prefix,
                                               bool with_lengths, bool with_flops, double peak_flops) {
  std::map<std::string, double> out;
  if (w.time <= 0) return out;
  out[prefix + "batches_per_sec"] = w.batches / w.time;
  out[prefix + "samples_per_sec"] = w.samples / w.time;
  if (with_lengths) out[prefix + "items_per_sec"] = w.lengths / w.time;
  if (with_flops) {
    out[prefix + "flops_per_sec"] = w.flops / w.time;
    if (peak_flops > 0) out[prefix + "mfu"] = w.flops / w.time / peak_flops;
  }
  return out;
}

// -- FlopCounter ------------------------------------------------------------------------------------
namespace profiler = torch::autograd::profiler;

FlopCounter::~FlopCounter() {
  if (running_) profiler::disableProfilerLegacy();
}

bool FlopCounter::available() { return !profiler::profilerEnabled(); }

void FlopCounter::start() {
  LT_CHECK(!running_, "FlopCounter::start: already counting");
  LT_CHECK(available(),
           "FlopCounter::start: another profiler runs on this thread (the Trainer's `profiler: pytorch`?)");
  missed_convolution_backward_ = false;
  profiler::enableProfilerLegacy(profiler::ProfilerConfig(profiler::ProfilerState::CPU, /*report_input_shapes=*/true,
                                                          /*profile_memory=*/false, /*with_stack=*/false,
                                                          /*with_flops=*/true));
  running_ = true;
}

double FlopCounter::stop() {
  LT_CHECK(running_, "FlopCounter::stop: not counting");
  running_ = false;
  // What FlopCounterMode counts: matrix products and convolutions, not the
  // element-wise aten::mul and aten::add the profiler also counts (a gradient's
  // scaling by a strategy, a loss's mean).
  static const std::set<std::string> kCounted = {"aten::mm", "aten::addmm", "aten::bmm", "aten::baddbmm",
                                                 "aten::conv2d"};
  double flops = 0;
  for (auto& events : profiler::disableProfilerLegacy()) {
    for (auto& event : events) {
      const std::string name = event.name();
      if (kCounted.count(name)) flops += static_cast<double>(event.flops());
      if (name == "aten::convolution_backward") missed_convolution_backward_ = true;
    }
  }
  return flops;
}

// -- measure_matmul_flops -----------------------------------------------------------------------------
double measure_matmul_flops(torch::Device device, torch::ScalarType dtype) {
  const int64_t n = device.is_cpu() ? 1024 : 8192;
  const auto options = torch::TensorOptions().device(device).dtype(dtype);
  const auto a = torch::randn({n, n}, options), b = torch::randn({n, n}, options);
  auto c = torch::empty({n, n}, options);
  const auto sync = [&] {
    if (device.is_cuda()) torch::cuda::synchronize(device.index());
  };
  torch::mm_out(c, a, b);
  sync();
  double best = 0;
  for (int round = 0; round < 5; ++round) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < 4; ++i) torch::mm_out(c, a, b);
    sync();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    best = std::max(best, 4 * 2.0 * static_cast<double>(n * n * n) / s);
  }
  return best;
}

}  // namespace lt
