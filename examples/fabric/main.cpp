// Fashion-MNIST from a plain training loop with lt::Fabric: the user's own
// CNN (a torch::nn::Module), optimizer and loop; each rank trains on its own
// slice of the training images, rank r on a share proportional to r + 1, so
// the ranks run different numbers of batches per epoch and fabric.join keeps
// them in step (lockstep Join) with gradient accumulation.
//
//   fabric_mnist [--devices N] [--epochs N] [--accumulate K] [--limit-batches N] [--data DIR] [--ckpt PATH]
// (--limit-batches N: rank r takes at most N * (r + 1) batches, for a quick run)
//
// --devices N > 1: this process launches N workers of itself (Fabric::launch).
// Prints each epoch's mean loss and, at the end, the test accuracy (every rank
// scores a slice of the 10000 test images; an all_reduce adds them up).
// SIGTERM or SIGINT: every rank stops after the same optimizer step, rank 0
// saves PATH and the program exits with 3; rerun it to resume.

#include <cstdio>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <string>

#include <lightning_cpp/data/fashion_mnist.h>
#include <lightning_cpp/lightning.h>

namespace {

struct NetImpl : torch::nn::Module {
  NetImpl() {
    conv1 = register_module("conv1", torch::nn::Conv2d(torch::nn::Conv2dOptions(1, 16, 3).padding(1)));
    conv2 = register_module("conv2", torch::nn::Conv2d(torch::nn::Conv2dOptions(16, 32, 3).padding(1)));
    fc1 = register_module("fc1", torch::nn::Linear(32 * 7 * 7, 128));
    fc2 = register_module("fc2", torch::nn::Linear(128, 10));
  }
  torch::Tensor forward(torch::Tensor x) {
    x = torch::max_pool2d(torch::relu(conv1(x)), 2);
    x = torch::max_pool2d(torch::relu(conv2(x)), 2);
    return fc2(torch::relu(fc1(x.flatten(1))));
  }
  torch::nn::Conv2d conv1{nullptr}, conv2{nullptr};
  torch::nn::Linear fc1{nullptr}, fc2{nullptr};
};
TORCH_MODULE(Net);

// Rows [begin, end) of rank r's share: weights 1, 2, ..., world size.
std::pair<int64_t, int64_t> share(int64_t rows, int64_t rank, int64_t world_size) {
  const int64_t total = world_size * (world_size + 1) / 2;
  const int64_t before = rank * (rank + 1) / 2;
  return {rows * before / total, rows * (before + rank + 1) / total};
}

}  // namespace

int main(int argc, char** argv) {
  int64_t devices = 1, epochs = 2, accumulate = 2, limit_batches = -1;
  std::string data_dir = lt::kFashionMnistDir;
  std::string ckpt = "fabric_mnist.ckpt";
  for (int i = 1; i < argc; ++i) {
    const bool value = i + 1 < argc;
    if (!std::strcmp(argv[i], "--devices") && value) devices = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--epochs") && value) epochs = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--accumulate") && value) accumulate = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--limit-batches") && value) limit_batches = std::stoll(argv[++i]);
    else if (!std::strcmp(argv[i], "--data") && value) data_dir = argv[++i];
    else if (!std::strcmp(argv[i], "--ckpt") && value) ckpt = argv[++i];
    else {
      std::cerr << "usage: fabric_mnist [--devices N] [--epochs N] [--accumulate K] [--limit-batches N] [--data DIR] "
                   "[--ckpt PATH]\n";
      return 2;
    }
  }
  try {
    lt::Fabric fabric(lt::FabricOptions().devices(devices));  // strategy "auto": ddp for 2 or more
    fabric.launch([&](lt::Fabric& f) {
      f.seed_everything(0);  // the same initial weights everywhere (DDP broadcasts rank 0's anyway)
      Net model;
      auto optimizer = f.setup(model, [](torch::nn::Module& m) -> lt::OptimizerConfig {
                          return std::make_shared<torch::optim::Adam>(m.parameters(), torch::optim::AdamOptions(1e-3));
                        }).optimizer;

      // This rank's own slice of the training images, shuffled each epoch.
      const lt::FashionMnistSplit train = lt::load_fashion_mnist(data_dir, /*train=*/true);
      auto [begin, end] = share(train.labels.size(0), f.global_rank(), f.world_size());
      if (limit_batches >= 0) end = std::min(end, begin + 64 * limit_batches * (f.global_rank() + 1));
      auto data = std::make_shared<lt::TensorDataset>(train.images.slice(0, begin, end),
                                                      train.labels.slice(0, begin, end));
      lt::DataLoader loader(data, lt::DataLoaderOptions(64).shuffle(true).seed(f.global_rank()));
      f.setup_dataloader(loader, /*use_distributed_sampler=*/false);  // keep the rank's own data
      f.print("rank 0 trains on ", end - begin, " images; the ranks' shares grow with their rank");

      if (std::filesystem::exists(ckpt)) {
        f.load(ckpt);
        f.print("resumed from ", ckpt, " at epoch ", f.current_epoch(), ", step ", f.global_step());
      }
      // The optimizer step every rank takes at each accumulation window's end,
      // a rank whose data ran out too (with the others' reduced gradient).
      auto step = [&] {
        f.clip_gradients(*optimizer, 1.0);
        optimizer->step();
        optimizer->zero_grad();
      };
      while (f.current_epoch() < epochs) {
        const int64_t epoch = f.current_epoch();
        double loss_sum = 0;
        int64_t batches = 0;
        for (lt::Batch& batch : f.join(loader, step, lt::JoinOptions().accumulate_grad_batches(accumulate))) {
          torch::Tensor loss = torch::nn::functional::cross_entropy(model->forward(batch.data), batch.target);
          f.backward(loss);
          loss_sum += loss.item<double>();
          ++batches;
        }
        if (f.interrupted() != 0) {
          f.save(ckpt);
          f.print("stopped on signal ", f.interrupted(), "; ", ckpt, " holds the run: run the same command to resume");
          return;
        }
        // Outside the loop's body every rank may reduce: the mean of the ranks' mean losses.
        const double mean = f.all_reduce(torch::tensor(batches > 0 ? loss_sum / batches : 0.0)).item<double>();
        f.print("epoch ", epoch, ": mean training loss ", mean, " (", f.global_step(), " steps)");
        f.log("train_loss", mean);
      }
      f.save(ckpt);

      // Each rank scores its share of the test images; the counts are summed.
      const lt::FashionMnistSplit test = lt::load_fashion_mnist(data_dir, /*train=*/false);
      const auto [test_begin, test_end] = share(test.labels.size(0), f.global_rank(), f.world_size());
      model->eval();
      torch::NoGradGuard no_grad;
      const torch::Tensor predicted =
          model->forward(test.images.slice(0, test_begin, test_end).to(f.device())).argmax(1);
      const torch::Tensor correct =
          (predicted == test.labels.slice(0, test_begin, test_end).to(f.device())).sum().to(torch::kDouble);
      const torch::Tensor counts = f.all_reduce(torch::stack({correct, torch::tensor(double(test_end - test_begin))}),
                                                lt::ReduceOp::kSum);
      f.print("test accuracy: ", counts[0].item<double>() / counts[1].item<double>());
    });
    return fabric.interrupted() != 0 ? lt::kExitStoppedOnRequest : 0;
  } catch (const lt::ValueError& e) {
    lt::report_failure(std::cerr, e.what());
    return 2;
  } catch (const std::exception& e) {
    lt::report_failure(std::cerr, e.what());
    return 1;
  }
}
