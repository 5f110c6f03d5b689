#include <lightning_cpp/core/cpu.h>

#include <algorithm>
#include <fstream>
#include <mutex>
#include <sstream>

#include <lightning_cpp/core/rank_zero.h>

namespace lt {

bool CpuInfo::has(const std::string& flag) const { return std::find(flags.begin(), flags.end(), flag) != flags.end(); }

const CpuInfo& cpu_info() {
  static const CpuInfo info = [] {
    CpuInfo out{"unknown CPU", {}};
    std::ifstream cpuinfo("/proc/cpuinfo");
    std::string line;
    bool model = false, flags = false;
    while (std::getline(cpuinfo, line) && !(model && flags)) {
      const auto colon = line.find(':');
      if (colon == std::string::npos || colon + 2 > line.size()) continue;
      if (!model && line.rfind("model name", 0) == 0) {
        out.model = line.substr(colon + 2);
        model = true;
      } else if (!flags && line.rfind("flags", 0) == 0) {
        std::istringstream words(line.substr(colon + 2));
        for (std::string w; words >> w;) out.flags.push_back(w);
        flags = true;
      }
    }
    return out;
  }();
  return info;
}

void warn_if_no_avx2() {
#if defined(__x86_64__) || defined(__i386__)
  static std::once_flag once;
  std::call_once(once, [] {
    const CpuInfo& cpu = cpu_info();
    if (!cpu.known() || cpu.has("avx2")) return;
    rank_zero_warn("this CPU (", cpu.model, ") has no AVX2: LibTorch's kernels run their default, unvectorized code, ",
                   "several times slower than on a CPU with AVX2");
  });
#endif
}

}  // namespace lt
