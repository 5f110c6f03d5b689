// bench/checkpoint: what saving and loading a checkpoint costs where the
// checkpoint is big: an MLP 784-H-H-10 (H = 8192: 74 M parameters) with Adam,
// 3 training steps, then one checkpoint (weights and Adam's two moments:
// ~884 MB). Each measurement runs in a fresh process, so each peak is its own:
//   save      the process's peak (VmHWM) after training and after its first
//             save; the fastest of 3 saves and its MB/s, as a ratio of a plain
//             write of as many bytes (fsync'ed and renamed, as a save's) made
//             beside each save in the same process: the first writes into this
//             VM's page cache run several times slower than later ones,
//             whoever writes them, so only side-by-side figures compare
//   load      seconds, and the peak above the process's before loading the
//             checkpoint into a fresh model and optimizer (the peak counts
//             the pages of a mapped file the load touched, which the kernel
//             shares and may drop; "own added" is the process's own memory,
//             RssAnon, it added, measured with the loaded checkpoint held)
// each for lightning-cpp's streamed checkpoint and, as the baseline in the
// same run, the in-memory way it had before (torch::pickle_save of the whole
// checkpoint, the optimizer as LibTorch's archive bytes; the whole file read
// to load), and PyTorch's torch.save / torch.load of the same state
// (checkpoint_bench.py, Debian's python3-torch) when it is there.
//
//   checkpoint_bench [--hidden H] [--rounds R] [--dir DIR]
#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <lightning_cpp/core/files.h>
#include <lightning_cpp/lightning.h>

#include "../machine_limit.h"
#include "../memory.h"
#include "../ranks.h"

namespace {

using lt::bench::status_kb;
using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// Seconds to replace a file of `bytes` bytes at `path` with as many bytes
// from memory (64 MB written again and again) as a checkpoint's save does
// (core/files.h: a temporary file, fsync, rename over the last one, which the
// saves here and torch.save's replace too), then removes it: this disk's
// speed, as a save meets it.
double disk_write_seconds(const std::string& path, int64_t bytes) {
  std::vector<char> block(64 << 20);
  for (size_t i = 0; i < block.size(); ++i) block[i] = static_cast<char>(i * 2654435761u >> 13);
  const auto write = [&] {
    lt::FileReplacement file(path);
    for (int64_t done = 0; done < bytes;) {
      const auto n = static_cast<size_t>(std::min<int64_t>(static_cast<int64_t>(block.size()), bytes - done));
      file.write(block.data(), n);
      done += static_cast<int64_t>(n);
    }
    file.commit();
  };
  write();  // the file it replaces
  const auto start = Clock::now();
  write();
  const double seconds = seconds_since(start);
  std::filesystem::remove(path);
  return seconds;
}

class Mlp : public lt::LightningModule {
 public:
  explicit Mlp(int64_t hidden) {
    torch::manual_seed(0);
    net_ = register_module("net", torch::nn::Sequential(torch::nn::Linear(784, hidden), torch::nn::ReLU(),
                                                         torch::nn::Linear(hidden, hidden), torch::nn::ReLU(),
                                                         torch::nn::Linear(hidden, 10)));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return torch::mse_loss(net_->forward(batch.data), batch.target);
  }
  lt::OptimizerConfig configure_optimizers() override {
    optimizer = std::make_shared<torch::optim::Adam>(parameters(), torch::optim::AdamOptions(1e-4));
    return optimizer;
  }
  bool has_validation_step() const override { return false; }
  bool has_test_step() const override { return false; }
  std::shared_ptr<torch::optim::Adam> optimizer;

 private:
  torch::nn::Sequential net_{nullptr};
};

struct Measure {
  int64_t before_kb = 0;  // peak before the save or load
  int64_t after_kb = 0;   // peak after it
  double seconds = 0;
  int64_t bytes = 0;
  double disk_seconds = 0;  // a plain write of as many bytes, beside it
  int64_t anon_kb = 0;      // a load: the process's own memory (RssAnon) it added, the checkpoint still held
};

void write_result(const Measure& m) {
  std::ofstream(std::getenv("LT_BENCH_OUT")) << m.before_kb << " " << m.after_kb << " " << m.seconds << " " << m.bytes
                                             << " " << m.disk_seconds << " " << m.anon_kb << "\n";
}

// A worker (LT_BENCH_ROLE): save or save_in_memory (train, then save to
// LT_BENCH_CKPT), load or load_in_memory (a fresh model and optimizer from it).
int worker_main(int64_t hidden) {
  const std::string role = std::getenv("LT_BENCH_ROLE"), path = std::getenv("LT_BENCH_CKPT");
  auto model = std::make_shared<Mlp>(hidden);
  Measure m;
  if (role == "save" || role == "save_in_memory") {
    // The save at the end of training (a checkpoint is dumped during a run).
    class Save : public lt::Callback {
     public:
      Save(std::string role, std::string path, Mlp& model, Measure& m)
          : role_(std::move(role)), path_(std::move(path)), model_(model), m_(m) {}
      std::string name() const override { return "Save"; }
      void on_train_end(lt::Trainer& trainer, lt::LightningModule& /*module*/) override {
        m_.before_kb = status_kb("VmHWM");
        // Saved 3 times, each beside a plain write of as many bytes: the
        // first writes into a VM's page cache are several times slower than
        // later ones, whatever writes them.
        for (int rep = 0; rep < 3; ++rep) {
          const auto start = Clock::now();
          if (role_ == "save") {
            trainer.save_checkpoint(path_);
          } else {
            // lightning-cpp before streaming: the optimizer as LibTorch's
            // archive bytes, the whole file in memory, then written.
            lt::StateDict checkpoint = trainer.dump_checkpoint();
            checkpoint.insert_or_assign("optimizer", lt::optimizer_to_bytes(*model_.optimizer));
            const std::vector<char> bytes = torch::pickle_save(checkpoint);
            lt::replace_file(path_, bytes.data(), bytes.size());
          }
          const double seconds = seconds_since(start);
          m_.seconds = rep == 0 ? seconds : std::min(m_.seconds, seconds);
          if (rep == 0) m_.after_kb = status_kb("VmHWM");
          const double disk = disk_write_seconds(path_ + ".disk", static_cast<int64_t>(std::filesystem::file_size(path_)));
          m_.disk_seconds = rep == 0 ? disk : std::min(m_.disk_seconds, disk);
        }
      }

     private:
      std::string role_, path_;
      Mlp& model_;
      Measure& m_;
    };
    const int64_t steps = 3, batch = 64;
    auto dataset = std::make_shared<lt::TensorDataset>(torch::randn({steps * batch, 784}), torch::rand({steps * batch, 10}));
    lt::Trainer trainer(lt::TrainerOptions()
                            .max_steps(steps)
                            .callbacks({std::make_shared<Save>(role, path, *model, m)})
                            .enable_progress_bar(false)
                            .enable_model_summary(false)
                            .default_logger(false)
                            .num_sanity_val_steps(0)
                            .default_root_dir(std::filesystem::path(path).parent_path().string()));
    trainer.fit(model, std::make_shared<lt::DataLoader>(dataset, lt::DataLoaderOptions(batch)));
    m.bytes = static_cast<int64_t>(std::filesystem::file_size(path));
  } else {
    model->configure_optimizers();
    m.before_kb = status_kb("VmHWM");
    const int64_t anon_before = status_kb("RssAnon");
    const auto start = Clock::now();
    c10::IValue loaded;
    if (role == "load") {
      loaded = lt::pickle_load_file(path);
    } else {
      std::ifstream in(path, std::ios::binary);
      const std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      loaded = torch::pickle_load(bytes);
    }
    const auto checkpoint = loaded.toGenericDict();
    lt::load_module_state_dict(*model, lt::state_dict_from(loaded, path));
    lt::load_optimizer_state_dict(*model->optimizer, checkpoint.at("optimizer"), path);
    m.seconds = seconds_since(start);
    m.bytes = static_cast<int64_t>(std::filesystem::file_size(path));
    m.after_kb = status_kb("VmHWM");
    m.anon_kb = status_kb("RssAnon") - anon_before;
  }
  write_result(m);
  return 0;
}

Measure read_result(const std::string& out) {
  Measure m;
  std::ifstream(out) >> m.before_kb >> m.after_kb >> m.seconds >> m.bytes >> m.disk_seconds >> m.anon_kb;
  std::filesystem::remove(out);
  return m;
}

Measure run_worker(const std::string& role, const std::string& ckpt, const std::string& out) {
  if (!lt::bench::run_ranks(1, {{"LT_BENCH_ROLE", role}, {"LT_BENCH_CKPT", ckpt}, {"LT_BENCH_OUT", out}},
                            "checkpoint_bench: " + role)) {
    std::exit(1);
  }
  return read_result(out);
}

// PyTorch's torch.save and torch.load of the same state (checkpoint_bench.py).
Measure run_python(const std::string& role, int64_t hidden, const std::string& ckpt, const std::string& out) {
  const std::string cmd = c10::str("/usr/bin/python3 ", LT_SOURCE_DIR, "/bench/checkpoint/checkpoint_bench.py ", role,
                                   " ", hidden, " ", ckpt, " ", out);
  if (std::system(cmd.c_str()) != 0) return {};
  return read_result(out);
}

void keep_best(Measure& best, const Measure& m) {
  // A peak and a time are properties of the work; noise only adds to them.
  if (best.seconds == 0 || m.seconds < best.seconds) best.seconds = m.seconds;
  if (best.disk_seconds == 0 || (m.disk_seconds > 0 && m.disk_seconds < best.disk_seconds)) {
    best.disk_seconds = m.disk_seconds;
  }
  if (best.after_kb == 0 || m.after_kb - m.before_kb < best.after_kb - best.before_kb) {
    best.before_kb = m.before_kb;
    best.after_kb = m.after_kb;
  }
  if (best.anon_kb == 0 || m.anon_kb < best.anon_kb) best.anon_kb = m.anon_kb;
  best.bytes = m.bytes;
}

}  // namespace

int main(int argc, char** argv) {
  int64_t hidden = 8192;
  int rounds = 2;
  std::string dir = std::filesystem::temp_directory_path().string();
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--hidden" && i + 1 < argc) hidden = std::atoll(argv[++i]);
    else if (a == "--rounds" && i + 1 < argc) rounds = std::max(1, std::atoi(argv[++i]));
    else if (a == "--dir" && i + 1 < argc) dir = argv[++i];
    else {
      std::cerr << "usage: checkpoint_bench [--hidden H] [--rounds R] [--dir DIR]\n";
      return 2;
    }
  }
  if (std::getenv("LT_BENCH_ROLE") != nullptr) return worker_main(hidden);

  const int64_t params = 784 * hidden + hidden + hidden * hidden + hidden + hidden * 10 + 10;
  std::printf("bench/checkpoint: MLP 784-%lld-%lld-10 (%.1f M parameters), Adam, 3 steps, one process; "
              "checkpoint in %s; best of %d rounds\n",
              static_cast<long long>(hidden), static_cast<long long>(hidden), static_cast<double>(params) / 1e6,
              dir.c_str(), rounds);
  std::printf("machine: %s; sgemm %.1f GFLOP/s on 1 thread\n", lt::bench::machine().c_str(),
              lt::bench::sgemm_gflops());
  std::fflush(stdout);
  const std::string base = dir + "/lt_checkpoint_bench_" + std::to_string(::getpid());
  const std::string ckpt = base + ".ckpt", out = base + ".out";
  const bool python = std::system("/usr/bin/python3 -c 'import torch' > /dev/null 2>&1") == 0;
  std::map<std::string, Measure> best;
  for (int round = 0; round < rounds; ++round) {
    // The in-memory way first: the streamed file it then leaves is the one both loads read.
    keep_best(best["save_in_memory"], run_worker("save_in_memory", ckpt, out));
    keep_best(best["save"], run_worker("save", ckpt, out));
    keep_best(best["load_in_memory"], run_worker("load_in_memory", ckpt, out));
    keep_best(best["load"], run_worker("load", ckpt, out));
    if (python) {
      keep_best(best["torch.save"], run_python("save", hidden, ckpt + ".py", out));
      keep_best(best["torch.load"], run_python("load", hidden, ckpt + ".py", out));
    }
  }
  std::filesystem::remove(ckpt);
  std::filesystem::remove(ckpt + ".py");
  const auto mb = [](double bytes) { return bytes / 1e6; };
  // The disk as the streamed saves met it: a plain write of as many bytes beside each.
  const double disk_mbs = mb(static_cast<double>(best["save"].bytes)) / best["save"].disk_seconds;
  std::printf("checkpoint %.0f MB; this disk takes %.0f MB/s (as many bytes from memory replacing a file as large, "
              "fsync'ed and renamed, beside each save)\n",
              mb(static_cast<double>(best["save"].bytes)), disk_mbs);
  std::printf("%-16s %12s %12s %9s %9s %10s %9s %8s %11s\n", "", "peak before", "peak after", "added", "ratio",
              "seconds", "MB/s", "/ disk", "own added");
  for (const char* role : {"save", "save_in_memory", "torch.save", "load", "load_in_memory", "torch.load"}) {
    if (best.count(role) == 0 || best[role].seconds == 0) continue;
    const Measure& m = best[role];
    const double mbs = mb(static_cast<double>(m.bytes)) / m.seconds;
    // A save against the plain writes beside it (the same process, the same minutes).
    const double disk = m.disk_seconds > 0 ? mb(static_cast<double>(m.bytes)) / m.disk_seconds : disk_mbs;
    const bool save = std::string(role).find("save") != std::string::npos;
    std::printf("%-16s %9.0f MB %9.0f MB %6.0f MB %8.2fx %10.2f %9.0f %8s %8s\n", role, m.before_kb / 1024.0,
                m.after_kb / 1024.0, (m.after_kb - m.before_kb) / 1024.0,
                static_cast<double>(m.after_kb) / static_cast<double>(m.before_kb), m.seconds, mbs,
                save ? c10::str(std::round(mbs / disk * 100) / 100, "x").c_str() : "",
                save ? "" : c10::str(std::lround(m.anon_kb / 1024.0), " MB").c_str());
  }
  std::printf("targets (issue 30): save's peak after <= 1.1x before; save >= 0.80x the disk's speed\n");
  return 0;
}
