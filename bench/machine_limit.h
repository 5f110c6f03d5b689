#pragma once
// What a benchmark's step could do on this machine at most: the sgemm rate
// measured in the same run, and the multiply-adds of an MLP step, so that a
// benchmark prints the fraction of the limit it reaches beside its ratios.

#include <unistd.h>

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

#include <torch/torch.h>

#include <lightning_cpp/core/blas.h>
#include <lightning_cpp/core/cpu.h>
#include <lightning_cpp/core/throughput.h>

namespace lt::bench {

// The CPU as /proc/cpuinfo names it, its cores, the vector units that decide
// a step's speed and the kernels OpenBLAS chose:
// "AMD EPYC 9R14 (2 cores; avx2 fma avx512f avx512_bf16; OpenBLAS Zen kernels)".
inline std::string machine() {
  const lt::CpuInfo& cpu = lt::cpu_info();
  std::string units;
  for (const char* f : {"avx2", "fma", "avx512f", "avx512_bf16", "amx_bf16"}) {
    if (cpu.has(f)) units += (units.empty() ? "" : " ") + std::string(f);
  }
  std::ostringstream out;
  out << cpu.model << " (" << ::sysconf(_SC_NPROCESSORS_ONLN) << " cores; " << (units.empty() ? "no avx2" : units);
  const lt::BlasInfo blas = lt::blas_info();
  if (!blas.openblas_core.empty()) out << "; OpenBLAS " << blas.openblas_core << " kernels";
  out << ")";
  return out.str();
}

// sgemm 1024^3 in GFLOP/s (torch::mm, the intra-op threads as set), best of
// 5: the rate ThroughputMonitor's MFU divides by on the CPU (core/throughput.h).
inline double sgemm_gflops() { return lt::measure_matmul_flops(torch::kCPU, torch::kFloat) / 1e9; }

// FLOPs of one training step of an MLP with these layer widths: forward
// 2 * batch * weights, backward twice that.
inline double mlp_step_flops(int64_t batch, std::initializer_list<int64_t> widths) {
  double weights = 0;
  for (auto it = widths.begin(); it + 1 != widths.end(); ++it) weights += static_cast<double>(*it * *(it + 1));
  return 3.0 * 2.0 * static_cast<double>(batch) * weights;
}

}  // namespace lt::bench
