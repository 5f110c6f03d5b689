#pragma once
// What the CPU can do, for the warnings that save a user from a slow default:
// its name and feature flags (x86: /proc/cpuinfo), read once per process.

#include <string>
#include <vector>

namespace lt {

struct CpuInfo {
  std::string model;               // "AMD EPYC 9R14 ..."; "unknown CPU" where not known
  std::vector<std::string> flags;  // "avx2", "avx512_bf16", ... (empty where not known)
  bool known() const { return !flags.empty(); }
  bool has(const std::string& flag) const;
};

const CpuInfo& cpu_info();

// Warns once per process, on rank 0, on an x86 CPU without AVX2: LibTorch's
// kernels then run their default (unvectorized) code, several times slower.
void warn_if_no_avx2();

}  // namespace lt
