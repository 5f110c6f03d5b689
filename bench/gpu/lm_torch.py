"""bench/gpu/lm_bench's model and work in Python: as a plain PyTorch loop, or through a Lightning 2.6 Trainer.

  python lm_torch.py plain|lightning [--accelerator cuda] [--precision bf16-mixed] [--warmup 10] [--steps 50]
                     [--batch 16] [--seq 512] [--layers 12] [--width 768] [--heads 12] [--vocab 8192]

The same GPT-style model as lm_bench.cpp (pre-norm blocks, causal scaled_dot_product_attention, a 4x GELU MLP,
an untied head), AdamW 3e-4, random tokens. plain is the strictest loop a user writes: the tokens already on the
device, each batch a slice of them, autocast around the forward, no DataLoader. lightning is what a Lightning
user writes: a LightningModule, a DataLoader of the tokens (pinned), Trainer(precision=...). Both time the steps
after the warm-up ones, the device synchronized at both ends. Prints "tokens/s <rate> step_ms <ms> parameters <n>".
"""
import argparse
import time

import torch
import torch.nn.functional as F
from torch import nn


def arguments():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["plain", "lightning"])
    p.add_argument("--accelerator", default="cuda")
    p.add_argument("--precision", default="bf16-mixed", choices=["32-true", "bf16-mixed"])
    for name, default in [("warmup", 10), ("steps", 50), ("batch", 16), ("seq", 512), ("layers", 12),
                          ("width", 768), ("heads", 12), ("vocab", 8192)]:
        p.add_argument(f"--{name}", type=int, default=default)
    return p.parse_args()


class Block(nn.Module):
    def __init__(self, width, heads):
        super().__init__()
        self.heads = heads
        self.ln1, self.ln2 = nn.LayerNorm(width), nn.LayerNorm(width)
        self.qkv, self.proj = nn.Linear(width, 3 * width), nn.Linear(width, width)
        self.fc, self.out = nn.Linear(width, 4 * width), nn.Linear(4 * width, width)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.heads, c // self.heads).permute(2, 0, 3, 1, 4)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, c))
        return x + self.out(F.gelu(self.fc(self.ln2(x))))


class LanguageModel(nn.Module):
    def __init__(self, a):
        super().__init__()
        self.tokens, self.positions = nn.Embedding(a.vocab, a.width), nn.Embedding(a.seq, a.width)
        self.blocks = nn.ModuleList(Block(a.width, a.heads) for _ in range(a.layers))
        self.ln, self.head = nn.LayerNorm(a.width), nn.Linear(a.width, a.vocab, bias=False)

    def forward(self, idx):
        x = self.tokens(idx) + self.positions(torch.arange(idx.shape[1], device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln(x))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def tokens(a):
    torch.manual_seed(0)
    stream = torch.randint(a.vocab, ((a.warmup + a.steps) * a.batch, a.seq + 1))
    return stream[:, :-1].contiguous(), stream[:, 1:].contiguous()


def plain(a, model, device):
    x, y = (t.to(device) for t in tokens(a))
    model.to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-4)
    bf16 = a.precision == "bf16-mixed"
    for i in range(a.warmup + a.steps):
        if i == a.warmup:
            synchronize(device)
            start = time.perf_counter()
        xb, yb = x[i * a.batch:(i + 1) * a.batch], y[i * a.batch:(i + 1) * a.batch]
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=bf16):
            loss = F.cross_entropy(model(xb).view(-1, a.vocab), yb.view(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()
    synchronize(device)
    return time.perf_counter() - start


def lightning(a, model, device):
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    class Module(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = model

        def training_step(self, batch, batch_idx):
            x, y = batch
            return F.cross_entropy(self.model(x).view(-1, a.vocab), y.view(-1))

        def configure_optimizers(self):
            return torch.optim.AdamW(self.parameters(), lr=3e-4)

    class Timer(pl.Callback):
        start = None

        def on_train_batch_end(self, trainer, module, outputs, batch, batch_idx):
            if batch_idx + 1 == a.warmup:
                synchronize(device)
                Timer.start = time.perf_counter()

    loader = DataLoader(TensorDataset(*tokens(a)), batch_size=a.batch, pin_memory=device.type == "cuda")
    trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, precision=a.precision,
                         max_steps=a.warmup + a.steps, max_epochs=1, logger=False, enable_checkpointing=False,
                         enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0,
                         callbacks=[Timer()])
    trainer.fit(Module(), loader)
    synchronize(device)
    return time.perf_counter() - Timer.start


def main():
    a = arguments()
    device = torch.device(a.accelerator)
    torch.manual_seed(0)
    model = LanguageModel(a)
    parameters = sum(p.numel() for p in model.parameters())
    seconds = (plain if a.mode == "plain" else lightning)(a, model, device)
    print(f"tokens/s {a.steps * a.batch * a.seq / seconds:.1f} step_ms {1000 * seconds / a.steps:.3f} "
          f"parameters {parameters}")


if __name__ == "__main__":
    main()
