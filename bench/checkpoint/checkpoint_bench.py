"""PyTorch's side of bench/checkpoint (Debian's python3-torch): the same MLP and Adam, 3 steps, then
torch.save of {"state_dict", "optimizer"} to a file (flushed, fsync'ed and renamed, as lightning-cpp's save;
3 times, the fastest counts), or torch.load of it into a fresh model and optimizer. Writes
"peak_before_kb peak_after_kb seconds bytes 0".

  checkpoint_bench.py save|load HIDDEN CKPT OUT
"""
import os
import resource
import sys
import time

import torch
from torch import nn


def peak_kb():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def status_kb(key):
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def main(role, hidden, ckpt, out):
    hidden = int(hidden)
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(784, hidden), nn.ReLU(), nn.Linear(hidden, hidden), nn.ReLU(),
                          nn.Linear(hidden, 10))
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-4)
    if role == "save":
        for _ in range(3):
            x, y = torch.randn(64, 784), torch.rand(64, 10)
            optimizer.zero_grad()
            nn.functional.mse_loss(model(x), y).backward()
            optimizer.step()
        before = peak_kb()
        seconds = []
        for _ in range(3):  # as the C++ saves: the first writes into a VM's page cache are the slowest
            start = time.perf_counter()
            with open(ckpt + ".tmp", "wb") as f:
                torch.save({"state_dict": dict(model.state_dict()), "optimizer": optimizer.state_dict()}, f)
                f.flush()
                os.fsync(f.fileno())
            os.rename(ckpt + ".tmp", ckpt)
            seconds.append(time.perf_counter() - start)
        after, anon = peak_kb(), 0  # a save's own memory is not measured
    else:
        before, anon = peak_kb(), status_kb("RssAnon")
        start = time.perf_counter()
        loaded = torch.load(ckpt)
        model.load_state_dict(loaded["state_dict"])
        optimizer.load_state_dict(loaded["optimizer"])
        seconds = [time.perf_counter() - start]
        after, anon = peak_kb(), status_kb("RssAnon") - anon  # the loaded checkpoint still held
    with open(out, "w") as f:
        f.write(f"{before} {after} {min(seconds)} {os.path.getsize(ckpt)} 0 {anon}\n")


if __name__ == "__main__":
    main(*sys.argv[1:])
