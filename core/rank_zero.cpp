#include <lightning_cpp/core/rank_zero.h>

#include <cstdio>
#include <mutex>
#include <set>

#include <lightning_cpp/core/env.h>

namespace lt {

int64_t rank_zero_env_rank() {
  for (const char* name : {"RANK", "SLURM_PROCID", "OMPI_COMM_WORLD_RANK", "PMI_RANK"}) {
    if (auto v = env::get(name)) {
      try {
        return std::stoll(*v);
      } catch (const std::exception&) {
        return 0;
      }
    }
  }
  return 0;
}

void rank_zero_info_message(const std::string& message) {
  std::fprintf(stdout, "%s\n", message.c_str());
  std::fflush(stdout);
}

void warn_message(const std::string& message) {
  static std::mutex mutex;
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(mutex);
  if (!seen.insert(message).second) return;
  std::fprintf(stderr, "lightning-cpp warning: %s\n", message.c_str());
  std::fflush(stderr);
}

}  // namespace lt
