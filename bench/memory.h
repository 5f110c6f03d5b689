#pragma once
// A process's memory as the kernel counts it, for the benchmarks' peaks.

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace lt::bench {

// A "Key:   N kB" line of a /proc file, in kB.
inline int64_t proc_kb(const char* file, const std::string& key) {
  std::ifstream in(file);
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(key + ":", 0) == 0) return std::atoll(line.c_str() + key.size() + 1);
  }
  return 0;
}

// kB of the process's resident set now (VmRSS) or at its peak (VmHWM).
inline int64_t status_kb(const std::string& key) { return proc_kb("/proc/self/status", key); }

// kB of the machine's memory (MemTotal, MemAvailable).
inline int64_t meminfo_kb(const std::string& key) { return proc_kb("/proc/meminfo", key); }

}  // namespace lt::bench
