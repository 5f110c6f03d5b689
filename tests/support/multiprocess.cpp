#include "support/multiprocess.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <set>
#include <sstream>

#include <lightning_cpp/core/check.h>

namespace lt::testing {

namespace {
std::map<std::string, WorkerFn>& workers() {
  static std::map<std::string, WorkerFn> registry;
  return registry;
}

}  // namespace

std::string read_file(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

bool register_worker(const std::string& name, WorkerFn fn) {
  return workers().emplace(name, std::move(fn)).second;
}

bool is_worker_process() { return std::getenv("LT_TEST_WORKER") != nullptr; }

int run_requested_worker() {
  const std::string name = std::getenv("LT_TEST_WORKER");
  auto it = workers().find(name);
  if (it == workers().end()) {
    std::cerr << "no test worker named '" << name << "' in this binary\n";
    return 90;
  }
  try {
    return it->second();
  } catch (const WorkerCheckFailure& e) {
    std::cerr << e.what() << std::endl;
    return 1;
  } catch (const std::exception& e) {
    std::cerr << "worker '" << name << "' rank " << env_str("RANK") << " threw: " << e.what() << "\n";
    return 91;
  }
}

int env_int(const char* name, int fallback) {
  const char* v = std::getenv(name);
  return v ? std::atoi(v) : fallback;
}

std::string env_str(const char* name, const std::string& fallback) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : fallback;
}

bool WorkersResult::ok() const {
  for (const auto& e : exits) {
    if (!e.ok()) return false;
  }
  return !exits.empty();
}

std::string WorkersResult::summary() const {
  std::ostringstream os;
  for (size_t r = 0; r < exits.size(); ++r) {
    os << "rank " << r << " " << exits[r].describe() << "\n";
    const std::string& out = outputs[r];
    os << "---- rank " << r << " output (tail) ----\n" << (out.size() > 3000 ? out.substr(out.size() - 3000) : out)
       << "\n";
  }
  return os.str();
}

void expect_workers_pass(const std::string& worker, int world, std::chrono::seconds timeout,
                         std::map<std::string, std::string> env) {
  WorkerOptions options;
  options.timeout = timeout;
  options.env = std::move(env);
  auto r = run_workers(worker, world, options);
  EXPECT_TRUE(r.ok()) << r.summary();
}

WorkersResult run_workers(const std::string& name, int world_size, const WorkerOptions& options) {
  const std::string exe = self_executable();
  const std::string first_port = std::to_string(find_free_port());
  const auto dir = std::filesystem::temp_directory_path() /
                   ("lt_workers_" + std::to_string(::getpid()) + "_" + name + "_" + first_port);
  std::filesystem::create_directories(dir);
  std::vector<WorkerSpec> specs;
  std::set<std::string> ports;
  for (int job = 0; job < options.jobs; ++job) {
    std::string port = first_port;
    while (!ports.insert(port).second) port = std::to_string(find_free_port());
    for (int rank = 0; rank < world_size; ++rank) {
      WorkerSpec spec;
      spec.argv = {exe};
      spec.env = options.env;
      spec.env["LT_TEST_WORKER"] = name;
      spec.env["RANK"] = std::to_string(rank);
      spec.env["LOCAL_RANK"] = std::to_string(rank);
      spec.env["WORLD_SIZE"] = std::to_string(world_size);
      spec.env["LOCAL_WORLD_SIZE"] = std::to_string(world_size);
      spec.env["MASTER_ADDR"] = "127.0.0.1";
      spec.env["MASTER_PORT"] = port;
      if (rank < static_cast<int>(options.rank_env.size())) {
        for (const auto& [k, v] : options.rank_env[rank]) spec.env[k] = v;
      }
      if (options.jobs > 1) spec.env["LT_JOB"] = std::to_string(job);
      spec.output_path = (dir / ("job" + std::to_string(job) + "_rank" + std::to_string(rank) + ".log")).string();
      specs.push_back(std::move(spec));
    }
  }
  WorkersResult result;
  result.exits = launch_and_wait(specs, LaunchOptions{std::chrono::duration_cast<std::chrono::milliseconds>(options.timeout)});
  for (const auto& spec : specs) result.outputs.push_back(read_file(spec.output_path));
  std::filesystem::remove_all(dir);
  return result;
}

}  // namespace lt::testing
