#!/usr/bin/python3
"""Reference parameters for tests/plugins/join/comm_hook_test.cpp's JoinCommHook test: PyTorch 1.13 DDP with
fp16_compress_hook (torch.distributed.algorithms.ddp_comm_hooks.default_hooks), under
Join, on join_oracle.py's model and data (float64 parameters; the hook casts each
bucket to float16). SGD lr 0.1, one epoch, no accumulation, 2 ranks on gloo.

Writes tests/fixtures/comm_hook_fp16.txt: one line per configuration,
"<counts, comma-separated> <parameters after training>".

Run with Debian's python3-torch 1.13: /usr/bin/python3 tests/python/comm_hook_oracle.py
"""
import os
import socket
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from join_oracle import LR, Net, batch, flat  # noqa: E402

CONFIGS = [[5, 5], [5, 8]]
OUT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "comm_hook_fp16.txt")


def worker(rank, port, out):
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=2)
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP
    lines = []
    for counts in CONFIGS:
        model = Net()
        ddp = DDP(model)
        ddp.register_comm_hook(None, fp16_compress_hook)
        opt = torch.optim.SGD(ddp.parameters(), lr=LR)
        with Join([ddp]):
            for i in range(counts[rank]):
                x, y = batch(rank, i)
                F.mse_loss(ddp(x), y).backward()
                opt.step()
                opt.zero_grad()
        lines.append("%s %s\n" % (",".join(map(str, counts)), " ".join("%.17g" % v for v in flat(model).tolist())))
    if rank == 0:
        with open(out, "w") as f:
            f.writelines(lines)
    dist.barrier()
    os._exit(0)


if __name__ == "__main__":
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(worker, args=(port, OUT), nprocs=2)
    print(open(OUT).read(), end="")
