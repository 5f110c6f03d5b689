"""bench/gpu/example_gpu's work in Python: as the strictest plain PyTorch loop, or through a Lightning 2.6 Trainer.

  python fashion_mnist_torch.py plain|lightning [--accelerator cuda] [--precision 32-true|16-mixed|bf16-mixed]
                                [--epochs 3] [--data DIR]

The example's work (examples/fashion_mnist): the MLP 784-256-256-10, Adam 1e-3, batches of 64 shuffled each
epoch, a fixed 55000/5000 split, validation each epoch (batches of 256), then the test set. plain: the images
already on the device, each batch an index into them, autocast (and for 16-mixed a GradScaler) as PyTorch's AMP
recipe has it, no DataLoader. lightning: a LightningModule and DataLoaders, Trainer(precision=...). Both time from
the first training batch to the end of the last epoch, the device synchronized. Prints
"steps/s <rate> train_s <seconds> accuracy <test accuracy>".
"""
import argparse
import os
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "example"))
from fashion_mnist_loop import read_idx  # noqa: E402 (the example's loader of the idx files)


def arguments():
    p = argparse.ArgumentParser()
    p.add_argument("mode", choices=["plain", "lightning"])
    p.add_argument("--accelerator", default="cuda")
    p.add_argument("--precision", default="32-true", choices=["32-true", "16-mixed", "bf16-mixed"])
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--data", default="/usr/share/datasets/fashion-mnist")
    return p.parse_args()


def load(a, train):
    prefix = f"{a.data}/{'train' if train else 't10k'}"
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz").float().div_(255).sub_(0.2860).div_(0.3530).flatten(1)
    return images, read_idx(f"{prefix}-labels-idx1-ubyte.gz").long()


def mlp():
    return nn.Sequential(nn.Linear(784, 256), nn.ReLU(), nn.Linear(256, 256), nn.ReLU(), nn.Linear(256, 10))


def synchronize(device):
    if device.type == "cuda":
        torch.cuda.synchronize()


def autocast(a, device):
    dtype = torch.float16 if a.precision == "16-mixed" else torch.bfloat16
    return torch.autocast(device.type, dtype=dtype, enabled=a.precision != "32-true")


def split(a):
    images, labels = load(a, True)
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(1234))
    train, val = perm[:-5000], perm[-5000:]
    return (images[train], labels[train]), (images[val], labels[val]), load(a, False)


def evaluate(model, x, y, a, device):
    model.eval()
    correct = 0
    with torch.no_grad(), autocast(a, device):
        for i in range(0, len(x), 256):
            correct += (model(x[i:i + 256]).argmax(1) == y[i:i + 256]).sum()
    model.train()
    return correct.item() / len(x)


def plain_loop(a, device):
    (x, y), (vx, vy), (tx, ty) = [tuple(t.to(device) for t in pair) for pair in split(a)]
    model = mlp().to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    scaler = torch.amp.GradScaler(device.type, enabled=a.precision == "16-mixed")
    steps = 0
    synchronize(device)
    start = time.perf_counter()
    for _ in range(a.epochs):
        order = torch.randperm(len(x), device=device)
        for i in range(0, len(x), 64):
            idx = order[i:i + 64]
            with autocast(a, device):
                loss = F.cross_entropy(model(x[idx]), y[idx])
            optimizer.zero_grad(set_to_none=True)
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            steps += 1
        evaluate(model, vx, vy, a, device)
    synchronize(device)
    seconds = time.perf_counter() - start
    return steps, seconds, evaluate(model, tx, ty, a, device)


def lightning(a, device):
    import pytorch_lightning as pl
    from torch.utils.data import DataLoader, TensorDataset

    (x, y), (vx, vy), (tx, ty) = split(a)

    class Classifier(pl.LightningModule):
        def __init__(self):
            super().__init__()
            self.model = mlp()

        def training_step(self, batch, batch_idx):
            loss = F.cross_entropy(self.model(batch[0]), batch[1])
            self.log("train_loss", loss, on_step=True, on_epoch=True, prog_bar=True)
            return loss

        def validation_step(self, batch, batch_idx):
            logits = self.model(batch[0])
            self.log("val_loss", F.cross_entropy(logits, batch[1]), prog_bar=True)
            self.log("val_acc", (logits.argmax(1) == batch[1]).float().mean(), prog_bar=True)

        def test_step(self, batch, batch_idx):
            self.log("test_acc", (self.model(batch[0]).argmax(1) == batch[1]).float().mean())

        def configure_optimizers(self):
            return torch.optim.Adam(self.parameters(), lr=1e-3)

    class Timer(pl.Callback):
        start = None

        def on_train_batch_start(self, trainer, module, batch, batch_idx):
            if trainer.global_step == 0 and Timer.start is None:
                synchronize(device)
                Timer.start = time.perf_counter()

    pin = device.type == "cuda"
    trainer = pl.Trainer(accelerator="gpu" if device.type == "cuda" else "cpu", devices=1, precision=a.precision,
                         max_epochs=a.epochs, logger=False, enable_checkpointing=False, enable_progress_bar=False,
                         enable_model_summary=False, callbacks=[Timer()])
    module = Classifier()
    trainer.fit(module, DataLoader(TensorDataset(x, y), batch_size=64, shuffle=True, pin_memory=pin),
                DataLoader(TensorDataset(vx, vy), batch_size=256, pin_memory=pin))
    synchronize(device)
    seconds = time.perf_counter() - Timer.start
    metrics = trainer.test(module, DataLoader(TensorDataset(tx, ty), batch_size=256, pin_memory=pin), verbose=False)
    return trainer.global_step, seconds, metrics[0]["test_acc"]


def main():
    a = arguments()
    device = torch.device(a.accelerator)
    torch.manual_seed(0)
    steps, seconds, accuracy = (plain_loop if a.mode == "plain" else lightning)(a, device)
    print(f"steps/s {steps / seconds:.1f} train_s {seconds:.3f} accuracy {accuracy:.4f}")


if __name__ == "__main__":
    main()
