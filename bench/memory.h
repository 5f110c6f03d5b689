#pragma once
// A process's memory as the kernel counts it, for the benchmarks' peaks.

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace lt::bench {

// kB of the process's resident set now (VmRSS) or at its peak (VmHWM).
inline int64_t status_kb(const std::string& key) {
  std::ifstream status("/proc/self/status");
  std::string line;
  while (std::getline(status, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return 0;
}

}  // namespace lt::bench
