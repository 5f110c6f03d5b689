// A GPT-style language model trained on random tokens through lt::Trainer:
// tokens per second after warm-up steps. By default about 100 M parameters
// (12 blocks of width 768 and 12 heads, a vocabulary of 8192, sequences of
// 512, batches of 16) in bf16-mixed on CUDA. bench/gpu/compare.py runs it
// beside the same model as a plain PyTorch loop and as a Lightning 2.6
// Trainer (bench/gpu/lm_torch.py) on the same GPU, and reports each one's
// tokens/s and MFU against the GPU's bf16 matrix-product rate measured in the
// same run.
//   lm_bench [--accelerator cuda] [--precision bf16-mixed] [--warmup 10] [--steps 50] [--batch 16] [--seq 512]
//            [--layers 12] [--width 768] [--heads 12] [--vocab 8192]
// Prints one line: "tokens/s <rate> step_ms <ms> parameters <count>".

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <map>
#include <memory>
#include <string>

#include <torch/cuda.h>
#include <torch/torch.h>

#include <lightning_cpp/lightning.h>

namespace {

struct Config {
  std::string accelerator = "cuda", precision = "bf16-mixed";
  int64_t warmup = 10, steps = 50, batch = 16, seq = 512, layers = 12, width = 768, heads = 12, vocab = 8192;
};

// Pre-norm block: causal self-attention (PyTorch's scaled_dot_product_attention) and a 4x MLP with GELU.
struct BlockImpl : torch::nn::Module {
  BlockImpl(int64_t width, int64_t heads) : heads(heads) {
    ln1 = register_module("ln1", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    qkv = register_module("qkv", torch::nn::Linear(width, 3 * width));
    proj = register_module("proj", torch::nn::Linear(width, width));
    ln2 = register_module("ln2", torch::nn::LayerNorm(torch::nn::LayerNormOptions({width})));
    fc = register_module("fc", torch::nn::Linear(width, 4 * width));
    out = register_module("out", torch::nn::Linear(4 * width, width));
  }
  torch::Tensor forward(torch::Tensor x) {
    const int64_t b = x.size(0), t = x.size(1), c = x.size(2);
    const torch::Tensor q_k_v = qkv(ln1(x)).view({b, t, 3, heads, c / heads}).permute({2, 0, 3, 1, 4});
    const torch::Tensor y = at::scaled_dot_product_attention(q_k_v[0], q_k_v[1], q_k_v[2], {}, 0.0, /*is_causal=*/true);
    x = x + proj(y.transpose(1, 2).reshape({b, t, c}));
    return x + out(torch::gelu(fc(ln2(x))));
  }
  int64_t heads;
  torch::nn::LayerNorm ln1{nullptr}, ln2{nullptr};
  torch::nn::Linear qkv{nullptr}, proj{nullptr}, fc{nullptr}, out{nullptr};
};
TORCH_MODULE(Block);

class LanguageModel : public lt::LightningModule {
 public:
  explicit LanguageModel(const Config& c) : vocab_(c.vocab) {
    tokens = register_module("tokens", torch::nn::Embedding(c.vocab, c.width));
    positions = register_module("positions", torch::nn::Embedding(c.seq, c.width));
    blocks = register_module("blocks", torch::nn::ModuleList());
    for (int64_t i = 0; i < c.layers; ++i) blocks->push_back(Block(c.width, c.heads));
    ln = register_module("ln", torch::nn::LayerNorm(torch::nn::LayerNormOptions({c.width})));
    head = register_module("head", torch::nn::Linear(torch::nn::LinearOptions(c.width, c.vocab).bias(false)));
  }
  torch::Tensor forward(const torch::Tensor& idx) {
    torch::Tensor x = tokens(idx) + positions(torch::arange(idx.size(1), idx.options()));
    for (const auto& block : *blocks) x = block->as<BlockImpl>()->forward(x);
    return head(ln(x));
  }
  torch::Tensor training_step(const lt::Batch& batch, int64_t /*batch_idx*/) override {
    return torch::cross_entropy_loss(forward(batch.data).view({-1, vocab_}), batch.target.view({-1}));
  }
  bool has_validation_step() const override { return false; }
  lt::OptimizerConfig configure_optimizers() override {
    return std::make_shared<torch::optim::AdamW>(parameters(), torch::optim::AdamWOptions(3e-4));
  }

 private:
  int64_t vocab_;
  torch::nn::Embedding tokens{nullptr}, positions{nullptr};
  torch::nn::ModuleList blocks{nullptr};
  torch::nn::LayerNorm ln{nullptr};
  torch::nn::Linear head{nullptr};
};

Config parse(int argc, char** argv) {
  Config c;
  std::map<std::string, int64_t*> ints = {{"--warmup", &c.warmup}, {"--steps", &c.steps},   {"--batch", &c.batch},
                                          {"--seq", &c.seq},       {"--layers", &c.layers}, {"--width", &c.width},
                                          {"--heads", &c.heads},   {"--vocab", &c.vocab}};
  for (int i = 1; i + 1 < argc; i += 2) {
    const std::string key = argv[i], value = argv[i + 1];
    if (key == "--accelerator") {
      c.accelerator = value;
    } else if (key == "--precision") {
      c.precision = value;
    } else if (ints.count(key) != 0) {
      *ints[key] = std::stoll(value);
    } else {
      std::cerr << "lm_bench: unknown option " << key << "\n";
      std::exit(2);
    }
  }
  return c;
}

void synchronize(const std::string& accelerator) {
  if (accelerator == "cuda") torch::cuda::synchronize();
}

}  // namespace

int main(int argc, char** argv) {
  const Config c = parse(argc, argv);
  torch::manual_seed(0);
  const int64_t sequences = (c.warmup + c.steps) * c.batch;
  // Random tokens; each target is the next token of the same sequence.
  const torch::Tensor stream = torch::randint(c.vocab, {sequences, c.seq + 1}, torch::kLong);
  auto data = std::make_shared<lt::TensorDataset>(stream.slice(1, 0, c.seq).contiguous(),
                                                  stream.slice(1, 1, c.seq + 1).contiguous());
  auto loader = std::make_shared<lt::DataLoader>(
      data, lt::DataLoaderOptions(c.batch).pin_memory(c.accelerator == "cuda"));
  auto model = std::make_shared<LanguageModel>(c);
  int64_t parameters = 0;
  for (const auto& p : model->parameters()) parameters += p.numel();
  std::chrono::steady_clock::time_point start;
  auto timer = std::make_shared<lt::LambdaCallback>();
  timer->on_train_batch_end_fn = [&](lt::Trainer&, lt::LightningModule&, const torch::Tensor&, const lt::Batch&,
                                     int64_t batch_idx) {
    if (batch_idx + 1 != c.warmup) return;
    synchronize(c.accelerator);
    start = std::chrono::steady_clock::now();
  };
  lt::Trainer trainer(lt::TrainerOptions()
                          .accelerator(c.accelerator)
                          .precision(c.precision)
                          .max_epochs(1)
                          .max_steps(c.warmup + c.steps)
                          .num_sanity_val_steps(0)
                          .enable_progress_bar(false)
                          .enable_model_summary(false)
                          .default_logger(false)
                          .callbacks({timer}));
  trainer.fit(model, loader);
  synchronize(c.accelerator);
  LT_CHECK(trainer.global_step() == c.warmup + c.steps, "lm_bench: ", trainer.global_step(), " steps ran, not ",
           c.warmup + c.steps);
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  std::printf("tokens/s %.1f step_ms %.3f parameters %lld\n", c.steps * c.batch * c.seq / seconds,
              1000.0 * seconds / c.steps, static_cast<long long>(parameters));
  return 0;
}
