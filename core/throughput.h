#pragma once
// Throughput and FLOP utilities (Lightning's lightning.fabric.utilities.throughput):
// - Throughput: a window of the last window_size cumulative records (time,
//   batches, samples, lengths, flops), from which rates over the window are
//   taken. Pure: the ThroughputMonitor callback and a Fabric loop feed it and
//   decide what to sum across ranks.
// - FlopCounter: the FLOPs LibTorch's profiler attributes to the matrix
//   products and 2-D convolutions run between start() and stop() on this
//   thread and the autograd threads it starts (aten::mm, addmm, bmm, baddbmm,
//   conv2d): what Python's FlopCounterMode (Lightning's measure_flops) counts
//   for products, forward and backward. The profiler has no count for a
//   convolution's backward: missed_convolution_backward() says when one ran
//   uncounted (give the FLOPs yourself then).
// - measure_matmul_flops: the FLOP/s one matrix product reaches on a device,
//   the peak that MFU divides by (the CPU's sgemm limit the benchmarks print).

#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <string>

#include <torch/torch.h>

namespace lt {

// One record: cumulative counts at a time (seconds from any fixed origin).
struct ThroughputRecord {
  double time = 0;
  double batches = 0;
  double samples = 0;
  double lengths = 0;  // items (tokens): what a length function counted
  double flops = 0;
};

class Throughput {
 public:
  explicit Throughput(int64_t window_size = 100);

  // Appends a record; the oldest leaves once window_size are held. Time and
  // the counts must not decrease (lt::ValueError naming the field otherwise).
  void update(const ThroughputRecord& record);
  // The last record minus the first of the window; none until two are held.
  std::optional<ThroughputRecord> window() const;
  // The last record (zeros before the first).
  ThroughputRecord totals() const;
  void reset() { records_.clear(); }
  int64_t window_size() const { return window_size_; }

 private:
  int64_t window_size_;
  std::deque<ThroughputRecord> records_;
};

// Rates of a window: "<prefix>batches_per_sec", "<prefix>samples_per_sec",
// "<prefix>items_per_sec" (with lengths), "<prefix>flops_per_sec" and, with
// peak_flops > 0, "<prefix>mfu" = flops_per_sec / peak_flops. A window of zero
// seconds gives no rates.
std::map<std::string, double> throughput_rates(const ThroughputRecord& window, const std::string& prefix,
                                               bool with_lengths, bool with_flops, double peak_flops);

// Counts FLOPs with LibTorch's autograd profiler (with_flops). Only one
// profiler runs per thread: available() is false while another (the
// Trainer's `profiler: pytorch`) does.
class FlopCounter {
 public:
  FlopCounter() = default;
  ~FlopCounter();
  FlopCounter(const FlopCounter&) = delete;
  FlopCounter& operator=(const FlopCounter&) = delete;

  static bool available();
  void start();
  // The FLOPs counted since start(); the profiler is off again.
  double stop();
  bool running() const { return running_; }
  // A convolution's backward ran between the last start() and stop() (its FLOPs are not counted).
  bool missed_convolution_backward() const { return missed_convolution_backward_; }

 private:
  bool running_ = false;
  bool missed_convolution_backward_ = false;
};

// The FLOP/s of an n x n matrix product of `dtype` on `device`, best of 5
// rounds of 4 (after one to warm up): n = 1024 on the CPU (the benchmarks'
// sgemm limit), 8192 on a GPU. A CUDA device is synchronized around each round.
double measure_matmul_flops(torch::Device device = torch::kCPU, torch::ScalarType dtype = torch::kFloat);

}  // namespace lt
