// The Fashion-MNIST example against the loop a Python user writes for the
// same work (bench/example/fashion_mnist_loop.py), run alternately in fresh
// processes: median wall time and peak RSS (the kernel's ru_maxrss of each
// process) and their ratios. Before that, in this process, the example's
// optimizer step: LibTorch's Adam::step against lt::step_optimizer on the
// MLP's parameters (269 K), median of many steps.
//   example_bench [--rounds N] [--epochs N]     (--rounds 0: the optimizer step only)
//   example_bench --overlap [--rounds N] [--epochs N]
// Each process trains as its defaults have it (intra-op threads: LibTorch's).
// --overlap: instead of Python's loop, the example against itself with a
// loader worker thread gathering the next batches while the loop trains
// (--num-workers 1), and without its loggers (--no-logger: what writing the
// logs costs, the most that overlapping it with compute could gain); one
// process, and 2 ddp ranks (--devices 2) with and without the worker.

#include <fcntl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <iostream>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/core/fused_optimizer.h>

#include "../machine_limit.h"

namespace {

struct Run {
  double seconds = 0;
  double peak_mib = 0;
  std::string output;
};

// Runs argv in `dir` with stdout and stderr to a file; its wall time and
// peak RSS. Exits the benchmark if the program fails.
Run run(const std::vector<std::string>& argv, const std::string& dir) {
  const std::string log = dir + "/output.txt";
  const auto t0 = std::chrono::steady_clock::now();
  const pid_t pid = ::fork();
  if (pid == 0) {
    if (::chdir(dir.c_str()) != 0) ::_exit(127);
    const int fd = ::open(log.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    ::dup2(fd, 1);
    ::dup2(fd, 2);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    ::execv(args[0], args.data());
    ::_exit(127);
  }
  int status = 0;
  struct rusage usage {};
  ::wait4(pid, &status, 0, &usage);
  Run r;
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.peak_mib = static_cast<double>(usage.ru_maxrss) / 1024.0;
  std::ifstream in(log);
  std::stringstream text;
  text << in.rdbuf();
  r.output = text.str();
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) {
    std::cerr << argv[0] << " failed (status " << status << "):\n" << r.output;
    std::exit(1);
  }
  return r;
}

std::string accuracy(const std::string& output) {
  const auto at = output.find("test accuracy: ");
  return at == std::string::npos ? "?" : output.substr(at + 15, 6);
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.size() % 2 ? v[v.size() / 2] : (v[v.size() / 2 - 1] + v[v.size() / 2]) / 2;
}

// ms per step of `step` on fresh copies of the MLP's parameters with Adam.
template <typename Step>
double adam_step_ms(Step step) {
  torch::manual_seed(0);
  std::vector<torch::Tensor> params;
  for (const auto& shape : std::vector<std::vector<int64_t>>{{256, 784}, {256}, {256, 256}, {256}, {10, 256}, {10}}) {
    params.push_back(torch::randn(shape).requires_grad_());
    params.back().mutable_grad() = torch::randn(shape) * 1e-2;
  }
  torch::optim::Adam adam(params, torch::optim::AdamOptions(1e-3));
  std::vector<double> ms;
  for (int i = 0; i < 1100; ++i) {
    const auto t0 = std::chrono::steady_clock::now();
    step(adam);
    if (i >= 100) ms.push_back(std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  return median(ms);
}

}  // namespace

int main(int argc, char** argv) {
  int rounds = 3, epochs = 3;
  bool overlap = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--rounds") && i + 1 < argc) rounds = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--epochs") && i + 1 < argc) epochs = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--overlap")) overlap = true;
    else {
      std::cerr << "usage: example_bench [--overlap] [--rounds N] [--epochs N]\n";
      return 2;
    }
  }
  std::printf("machine: %s\n", lt::bench::machine().c_str());
  const int threads = at::get_num_threads();
  at::set_num_threads(1);
  std::printf("sgemm 1024^3: %.0f GFLOP/s on 1 thread", lt::bench::sgemm_gflops());
  at::set_num_threads(threads);
  std::printf(" (LibTorch's default: %d intra-op threads)\n", threads);

  for (int t = 1; t <= std::max<int>(2, threads); ++t) {
    at::set_num_threads(t);
    const double libtorch = adam_step_ms([](torch::optim::Adam& adam) { adam.step(); });
    const double fused = adam_step_ms([](torch::optim::Adam& adam) { lt::step_optimizer(adam); });
    std::printf("Adam step over the example's 269 K parameters, %d thread(s): Adam::step %.3f ms, "
                "lt::step_optimizer %.3f ms (%.1fx; target <= 0.15 ms)\n",
                t, libtorch, fused, libtorch / fused);
  }
  at::set_num_threads(threads);
  if (rounds == 0) return 0;  // --rounds 0: the optimizer step only

  char dir_template[] = "/tmp/lt_example_bench_XXXXXX";
  const std::string dir = ::mkdtemp(dir_template);
  const std::string data = "/usr/share/datasets/fashion-mnist";
  const std::vector<std::string> cpp = {LT_FASHION_MNIST, "--epochs", std::to_string(epochs), "--data", data};
  if (overlap) {
    const std::vector<std::pair<std::string, std::vector<std::string>>> variants = {
        {"1 process", {}},
        {"1 process, --num-workers 1", {"--num-workers", "1"}},
        {"1 process, --no-logger", {"--no-logger"}},
        {"2 ddp ranks", {"--devices", "2"}},
        {"2 ddp ranks, --num-workers 1", {"--devices", "2", "--num-workers", "1"}}};
    std::vector<std::vector<double>> seconds(variants.size());
    for (int round = 0; round < rounds; ++round) {
      for (size_t k = 0; k < variants.size(); ++k) {
        const size_t v = (k + static_cast<size_t>(round)) % variants.size();  // a different one first each round
        std::vector<std::string> argv = cpp;
        argv.insert(argv.end(), variants[v].second.begin(), variants[v].second.end());
        const Run r = run(argv, dir);
        seconds[v].push_back(r.seconds);
        std::printf("round %d %-30s %6.2f s  peak %5.0f MiB  test accuracy %s\n", round, variants[v].first.c_str(),
                    r.seconds, r.peak_mib, accuracy(r.output).c_str());
        std::fflush(stdout);
      }
    }
    std::system(("rm -rf " + dir).c_str());
    for (size_t v = 0; v < variants.size(); ++v) {
      const size_t base = v < 3 ? 0 : 3;
      std::printf("%-30s median %6.2f s: %.3fx the time of %s\n", variants[v].first.c_str(), median(seconds[v]),
                  median(seconds[v]) / median(seconds[base]), variants[base].first.c_str());
    }
    return 0;
  }
  const std::vector<std::string> python = {"/usr/bin/python3", LT_SOURCE_DIR "/bench/example/fashion_mnist_loop.py",
                                           data, std::to_string(epochs)};
  std::vector<double> cpp_s, python_s, cpp_mib, python_mib;
  for (int round = 0; round < rounds; ++round) {
    // Alternating which goes first: neither always finds the page cache warm.
    for (int k = 0; k < 2; ++k) {
      const bool ours = (round + k) % 2 == 0;
      const Run r = run(ours ? cpp : python, dir);
      (ours ? cpp_s : python_s).push_back(r.seconds);
      (ours ? cpp_mib : python_mib).push_back(r.peak_mib);
      std::printf("round %d %-8s %6.2f s  peak %5.0f MiB  test accuracy %s\n", round, ours ? "lt" : "python",
                  r.seconds, r.peak_mib, accuracy(r.output).c_str());
      std::fflush(stdout);
    }
  }
  std::system(("rm -rf " + dir).c_str());
  const double speed = median(python_s) / median(cpp_s);
  const double memory = median(cpp_mib) / median(python_mib);
  std::printf("example (%d epochs, validation, test) / Python loop, median of %d: wall %.2f s vs %.2f s = %.2fx "
              "as fast (target >= 1.6x); peak RSS %.0f vs %.0f MiB = %.2fx (target <= 1.0x)\n",
              epochs, rounds, median(cpp_s), median(python_s), speed, median(cpp_mib), median(python_mib), memory);
  return 0;
}
