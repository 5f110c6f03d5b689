#include <lightning_cpp/core/rank_zero.h>

#include <cstdio>
#include <filesystem>
#include <mutex>
#include <set>
#include <system_error>
#include <utility>

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

namespace {
std::mutex g_name_mutex;
std::string g_program_name;  // guarded by g_name_mutex; empty: the executable's file name
}  // namespace

std::string program_name() {
  std::lock_guard<std::mutex> lock(g_name_mutex);
  if (g_program_name.empty()) {
    std::error_code ec;
    const std::string exe = std::filesystem::read_symlink("/proc/self/exe", ec).filename().string();
    g_program_name = ec || exe.empty() ? "lightning-cpp" : exe;
  }
  return g_program_name;
}

void set_program_name(std::string name) {
  std::lock_guard<std::mutex> lock(g_name_mutex);
  g_program_name = std::move(name);
}

namespace {
std::mutex g_warning_mutex;
WarningHandler g_warning_handler;  // guarded by g_warning_mutex
WarningHandler g_info_handler;     // guarded by g_warning_mutex
}  // namespace

WarningHandler set_info_handler(WarningHandler handler) {
  std::lock_guard<std::mutex> lock(g_warning_mutex);
  std::swap(handler, g_info_handler);
  return handler;
}

void rank_zero_info_message(const std::string& message) {
  std::lock_guard<std::mutex> lock(g_warning_mutex);
  if (g_info_handler) {
    g_info_handler(message);
    return;
  }
  std::fprintf(stdout, "%s\n", message.c_str());
  std::fflush(stdout);
}

WarningHandler set_warning_handler(WarningHandler handler) {
  std::lock_guard<std::mutex> lock(g_warning_mutex);
  std::swap(handler, g_warning_handler);
  return handler;
}

void warn_message(const std::string& message) {
  static std::set<std::string> seen;
  std::lock_guard<std::mutex> lock(g_warning_mutex);
  if (!seen.insert(message).second) return;
  if (g_warning_handler) {
    g_warning_handler(message);
    return;
  }
  std::fprintf(stderr, "%s warning: %s\n", program_name().c_str(), message.c_str());
  std::fflush(stderr);
}

}  // namespace lt
