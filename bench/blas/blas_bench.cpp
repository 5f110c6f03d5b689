// bench/blas: what the BLAS behind LibTorch gives on this machine, as
// LibTorch and the trainer use it. Prints one line per figure:
//   sgemm 1024^3 GFLOP/s with 1 and with 2 intra-op threads (torch::mm);
//   the same summed over 2 processes of 1 intra-op thread each, run at once
//     (two DDP ranks on two cores: a BLAS that starts threads of its own
//     oversubscribes the cores here);
//   training steps/s of a 784-256-256-10 MLP (batch 64, SGD), 1 process of 1
//     thread, and summed over 2 such processes at once.
// bench/blas/compare_blas.sh runs it under each installed BLAS.
//
//   blas_bench [--seconds S]   (each figure: the best of 3 runs of about S/3 s)
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <string>

#include <lightning_cpp/core/blas.h>
#include <torch/torch.h>

namespace {

using Clock = std::chrono::steady_clock;

// Runs `step` for about `seconds`; returns steps per second.
double rate(const std::function<void()>& step, double seconds) {
  step();  // warm-up
  int64_t n = 0;
  const auto start = Clock::now();
  double elapsed = 0;
  while (elapsed < seconds) {
    step();
    ++n;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  return static_cast<double>(n) / elapsed;
}

double best_of_3(const std::function<double()>& measure) {
  double best = 0;
  for (int i = 0; i < 3; ++i) best = std::max(best, measure());
  return best;
}

constexpr int64_t kN = 1024;

double sgemm_gflops(double seconds) {
  torch::manual_seed(0);
  const auto a = torch::randn({kN, kN}), b = torch::randn({kN, kN});
  auto c = torch::empty({kN, kN});
  return 2.0 * kN * kN * kN * rate([&] { torch::mm_out(c, a, b); }, seconds) / 1e9;
}

double mlp_steps(double seconds) {
  torch::manual_seed(0);
  torch::nn::Sequential net(torch::nn::Linear(784, 256), torch::nn::ReLU(), torch::nn::Linear(256, 256),
                            torch::nn::ReLU(), torch::nn::Linear(256, 10));
  torch::optim::SGD sgd(net->parameters(), 0.01);
  const auto x = torch::randn({64, 784});
  const auto y = torch::randint(10, {64});
  return rate(
      [&] {
        sgd.zero_grad();
        torch::cross_entropy_loss(net->forward(x), y).backward();
        sgd.step();
      },
      seconds);
}

// `measure` in 2 processes at once (1 intra-op thread each): the sum of their results.
double in_two_processes(const std::function<double()>& measure) {
  int fds[2][2];
  pid_t pids[2];
  for (int p = 0; p < 2; ++p) {
    if (pipe(fds[p]) != 0) std::abort();
    pids[p] = fork();
    if (pids[p] == 0) {
      torch::set_num_threads(1);
      const double r = measure();
      if (write(fds[p][1], &r, sizeof r) != sizeof r) _exit(1);
      _exit(0);
    }
    close(fds[p][1]);
  }
  double sum = 0;
  for (int p = 0; p < 2; ++p) {
    double r = 0;
    if (read(fds[p][0], &r, sizeof r) != sizeof r) r = 0;
    sum += r;
    close(fds[p][0]);
    waitpid(pids[p], nullptr, 0);
  }
  return sum;
}

}  // namespace

int main(int argc, char** argv) {
  double seconds = 3.0;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--seconds") && i + 1 < argc) {
      seconds = std::atof(argv[++i]);
    } else {
      std::fprintf(stderr, "usage: blas_bench [--seconds S]\n");
      return 2;
    }
  }
  const double each = seconds / 3;
  const lt::BlasInfo info = lt::blas_info();
  std::printf("blas: %s%s%s\n", info.library.empty() ? "(none found)" : info.library.c_str(),
              info.reference ? " (reference)" : "", info.openblas_config.empty() ? "" :
              (" (" + info.openblas_config + ")").c_str());
  // Two processes first: forked before this process starts any thread pool.
  const double sgemm_two = best_of_3([&] { return in_two_processes([&] { return sgemm_gflops(each); }); });
  const double mlp_two = best_of_3([&] { return in_two_processes([&] { return mlp_steps(each); }); });
  torch::set_num_threads(1);
  const double sgemm_1 = best_of_3([&] { return sgemm_gflops(each); });
  const double mlp_1 = best_of_3([&] { return mlp_steps(each); });
  torch::set_num_threads(2);
  const double sgemm_2 = best_of_3([&] { return sgemm_gflops(each); });
  std::printf("sgemm GFLOP/s, 1 thread: %.1f\n", sgemm_1);
  std::printf("sgemm GFLOP/s, 2 threads: %.1f\n", sgemm_2);
  std::printf("sgemm GFLOP/s, 2 processes x 1 thread: %.1f\n", sgemm_two);
  std::printf("MLP steps/s, 1 thread: %.0f\n", mlp_1);
  std::printf("MLP steps/s, 2 processes x 1 thread: %.0f\n", mlp_two);
  return 0;
}
