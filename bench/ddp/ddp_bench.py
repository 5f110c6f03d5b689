#!/usr/bin/python3
"""The Python side of bench/ddp: the same MLP and loop as ddp_bench.cpp in
plain PyTorch (torch 1.13, gloo), one process, or N processes under
torch.nn.parallel.DistributedDataParallel. One intra-op thread per process.

    /usr/bin/python3 bench/ddp/ddp_bench.py --world 2 --steps 300 --warmup 30
prints one line per run: "python world=<N> steps_per_s=<rank 0's steps/s>".
"""
import argparse
import os
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel


def mlp(hidden):
    return torch.nn.Sequential(
        torch.nn.Flatten(),
        torch.nn.Linear(28 * 28, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, hidden), torch.nn.ReLU(),
        torch.nn.Linear(hidden, 10))


def run(rank, world, args, port, queue):
    torch.set_num_threads(1)
    if world > 1:
        os.environ["MASTER_ADDR"] = "127.0.0.1"
        os.environ["MASTER_PORT"] = str(port)
        dist.init_process_group("gloo", rank=rank, world_size=world)
    torch.manual_seed(0)
    model = mlp(args.hidden)
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=0.01)
    g = torch.Generator()
    g.manual_seed(rank)
    x = torch.randn(args.batch * 16, 1, 28, 28, generator=g)
    y = torch.randint(10, (args.batch * 16,), generator=g)
    t0 = None
    for i in range(args.warmup + args.steps):
        if i == args.warmup:
            t0 = time.perf_counter()
        b = i % 16
        xb, yb = x[b * args.batch:(b + 1) * args.batch], y[b * args.batch:(b + 1) * args.batch]
        opt.zero_grad()
        loss = F.cross_entropy(model(xb), yb)
        loss.backward()
        opt.step()
    sps = args.steps / (time.perf_counter() - t0)
    if world > 1:
        dist.destroy_process_group()
    queue.put((rank, sps))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--world", type=int, default=2)
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--warmup", type=int, default=30)
    p.add_argument("--batch", type=int, default=64)
    p.add_argument("--hidden", type=int, default=256)
    args = p.parse_args()
    ctx = mp.get_context("spawn")
    for world in sorted({1, args.world}):
        queue = ctx.Queue()
        port = free_port()
        procs = [ctx.Process(target=run, args=(r, world, args, port, queue)) for r in range(world)]
        for proc in procs:
            proc.start()
        results = dict(queue.get(timeout=600) for _ in procs)
        for proc in procs:
            proc.join(60)
        print(f"python world={world} steps_per_s={results[0]:.2f}", flush=True)


if __name__ == "__main__":
    main()
