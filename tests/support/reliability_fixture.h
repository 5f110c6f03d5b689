#pragma once
// What the reliability_test binary's files share: a worker started by hand
// (on a pseudo-terminal if asked), a temporary folder, a tiny module, and a
// substring test for the workers' output.
#include <fcntl.h>
#include <pty.h>
#include <unistd.h>

#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <torch/torch.h>

#include <lightning_cpp/plugins/launchers/subprocess_script.h>
#include <lightning_cpp/trainer/trainer.h>

extern char** environ;

namespace lt::testing::reliability {

namespace fs = std::filesystem;

// Starts this binary running the worker `name` (stdout and stderr to
// `output`, if given; with `terminal`, on a new pseudo-terminal whose master
// end is stored there, as a program started from a shell).
inline pid_t start_worker(const std::string& name, const std::map<std::string, std::string>& env,
                          const std::string& output = {}, int* terminal = nullptr) {
  std::vector<std::string> strings;
  for (char** e = environ; *e; ++e) strings.emplace_back(*e);
  strings.push_back("LT_TEST_WORKER=" + name);
  for (const auto& [k, v] : env) strings.push_back(k + "=" + v);
  std::vector<char*> envp;
  for (auto& s : strings) envp.push_back(s.data());
  envp.push_back(nullptr);
  const std::string exe = lt::self_executable();
  const pid_t pid = terminal != nullptr ? forkpty(terminal, nullptr, nullptr, nullptr) : fork();
  if (pid == 0) {
    if (!output.empty() && terminal == nullptr) {
      const int fd = ::open(output.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
      ::dup2(fd, STDOUT_FILENO);
      ::dup2(fd, STDERR_FILENO);
    }
    char* argv[] = {const_cast<char*>(exe.c_str()), nullptr};
    execve(exe.c_str(), argv, envp.data());
    _exit(127);
  }
  return pid;
}

struct TempDir {
  TempDir()
      : path(fs::temp_directory_path() / ("lt_reliability_" + std::to_string(getpid()) + "_" + std::to_string(next()))) {
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
  static int next() {
    static int count = 0;
    return count++;
  }
  fs::path path;
};

class Tiny : public lt::LightningModule {
 public:
  Tiny() { fc = register_module("fc", torch::nn::Linear(2, 1)); }
  torch::Tensor training_step(const lt::Batch& b, int64_t) override { return torch::mse_loss(fc(b.data), b.target); }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::SGD>(parameters(), 0.1);
  }
  torch::nn::Linear fc{nullptr};
};

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

}  // namespace lt::testing::reliability
