#include <lightning_cpp/plugins/launchers/worker_process.h>

#include <sched.h>

#include <algorithm>
#include <csignal>
#include <cstdio>

#include <ATen/Parallel.h>

#include <lightning_cpp/core/env.h>

namespace lt {

namespace {

// More threads than LibTorch's default slowed the example down (docs/benchmarks.md).
void share_the_cpus(int64_t local_ranks) {
  if (env::get("OMP_NUM_THREADS") || local_ranks <= 1) return;
  cpu_set_t cpus;
  CPU_ZERO(&cpus);
  if (::sched_getaffinity(0, sizeof cpus, &cpus) != 0) return;
  const int share = std::max<int>(1, CPU_COUNT(&cpus) / static_cast<int>(local_ranks));
  if (share < at::get_num_threads()) at::set_num_threads(share);
}

}  // namespace

void configure_worker_process(int64_t local_ranks) {
  share_the_cpus(local_ranks);
  std::signal(SIGPIPE, SIG_IGN);
  std::fflush(stdout);
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
}

}  // namespace lt
