#!/usr/bin/python3
"""Reference parameters for tests/plugins/join/ (JoinMatrix.*, JoinLockstep.*).

Writes tests/fixtures/join_matrix.txt: for each configuration of the matrix
(world size, per-rank batch counts, accumulate_grad_batches k,
divide_by_initial_world_size, throw_on_early_termination, epochs) the model's
parameters after training, computed two ways:

  window_rule  single process, float64: window w = micro-batches [w*k, (w+1)*k)
               of every rank that has them; one SGD step per window with
               gradient (1/D) * sum of the gradients of (loss / k) over all of
               the window's micro-batches on all ranks, D = world size, or with
               divide_by_initial_world_size off the number of ranks with data in
               the window. With throw_on_early_termination, training stops after
               the window in which the shortest rank ends.
  pytorch      where PyTorch can serve (every rank's count a multiple of k):
               DistributedDataParallel + torch.distributed.algorithms.join.Join
               on gloo, no_sync on accumulation micro-batches, one worker
               process per rank. Must agree with window_rule within 1e-9.

Also writes tests/fixtures/join_lockstep.txt: the same models and data with
stateful optimizers (SGD, SGD with momentum 0.9, Adam) over 1 to 3 epochs, for
both join modes:

  lockstep     the window rule with that optimizer: one optimizer stepping once
               per window on the union of the ranks' micro-batches (every
               configuration, uneven windows and ranks without data included).
  pytorch      PyTorch DDP + Join with that optimizer (aligned configurations
               only): the early joiner's optimizer does not step, and the last
               joiner's parameters are broadcast at each epoch's end.

Run with Debian's python3-torch 1.13: /usr/bin/python3 tests/python/join_oracle.py
The data, initial weights and model are defined identically in tests/distributed/join_oracle.h.
"""
import argparse
import contextlib
import os
import socket
import subprocess
import sys

import torch
import torch.distributed as dist
import torch.nn.functional as F

LR = 0.1
BATCH = 2
IN = 3
HIDDEN = 4

# (world size, per-rank batch counts); the matrix crosses them with k, divide, throw.
PATTERNS = [
    (2, [5, 8]), (2, [0, 4]), (2, [6, 6]),
    (3, [3, 7, 5]), (3, [0, 2, 6]), (3, [4, 4, 1]),
    (4, [2, 9, 0, 5]), (4, [7, 3, 3, 8]), (4, [6, 0, 3, 6]),
]
EPOCHS_2 = {(2, (5, 8)), (3, (0, 2, 6))}  # these also run 2 epochs


# (world size, per-rank batch counts) of the stateful-optimizer matrix.
LOCKSTEP_PATTERNS = [
    (2, [5, 8]), (2, [0, 4]), (3, [3, 7, 5]), (3, [0, 2, 6]), (4, [2, 9, 0, 5]), (4, [6, 0, 3, 6]),
]
OPTIMIZERS = ("sgd", "momentum", "adam")


def lockstep_configs():
    out = []
    for ws, counts in LOCKSTEP_PATTERNS:
        for optim in OPTIMIZERS:
            for k in (1, 2, 3):
                for divide in (1, 0):
                    for epochs in (1, 3):
                        out.append(dict(ws=ws, counts=counts, k=k, divide=divide, throw=0, epochs=epochs, optim=optim))
    return out


def make_optimizer(name, params):
    if name == "sgd":
        return torch.optim.SGD(params, lr=LR)
    if name == "momentum":
        return torch.optim.SGD(params, lr=LR, momentum=0.9)
    return torch.optim.Adam(params, lr=0.01)


def configs():
    out = []
    for ws, counts in PATTERNS:
        for k in (1, 2, 3):
            for divide in (1, 0):
                for throw in (0, 1):
                    epochs = 2 if (ws, tuple(counts)) in EPOCHS_2 and not throw else 1
                    out.append(dict(ws=ws, counts=counts, k=k, divide=divide, throw=throw, epochs=epochs))
    return out


def init_params(model):
    """float64, every parameter from one formula (join_oracle.h's init_like_oracle)."""
    model.double()
    with torch.no_grad():
        for j, p in enumerate(model.parameters()):
            i = torch.arange(p.numel(), dtype=torch.float64)
            p.copy_((0.3 * torch.sin(1.0 + 0.7 * i + 1.3 * j)).reshape(p.shape))


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(IN, HIDDEN)
        self.l2 = torch.nn.Linear(HIDDEN, 1)
        init_params(self)

    def forward(self, x):
        return self.l2(torch.tanh(self.l1(x)))


def batch(rank, b):
    s = torch.arange(BATCH, dtype=torch.float64)
    d = torch.arange(IN, dtype=torch.float64)
    x = torch.sin(0.5 + 0.31 * rank + 0.17 * b + 0.05 * s.unsqueeze(1) + 0.9 * d.unsqueeze(0))
    y = torch.cos(0.2 * rank + 0.13 * b + 0.4 * s).unsqueeze(1)
    return x, y


def flat(model):
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def window_gradients(model, c, w):
    """Window w's gradients, summed over every rank's micro-batches of w, and the divisor D."""
    ws, counts, k = c["ws"], c["counts"], c["k"]
    grads = [torch.zeros_like(p) for p in model.parameters()]
    active = sum(1 for n in counts if n > w * k)
    for r in range(ws):
        for i in range(w * k, min((w + 1) * k, counts[r])):
            model.zero_grad()
            x, y = batch(r, i)
            (F.mse_loss(model(x), y) / k).backward()
            for g, p in zip(grads, model.parameters()):
                g += p.grad
    return grads, (ws if c["divide"] else active)


def window_rule(c):
    model = Net()
    counts, k = c["counts"], c["k"]
    windows = -(-max(counts) // k)
    if c["throw"]:
        windows = -(-min(counts) // k)
    for _ in range(c["epochs"]):
        for w in range(windows):
            grads, D = window_gradients(model, c, w)
            with torch.no_grad():
                for g, p in zip(grads, model.parameters()):
                    p -= LR * g / D
    return flat(model)


def window_rule_optimizer(c):
    """The window rule with a (stateful) optimizer: what lockstep Join computes."""
    model = Net()
    opt = make_optimizer(c["optim"], model.parameters())
    windows = -(-max(c["counts"]) // c["k"])
    for _ in range(c["epochs"]):
        for w in range(windows):
            grads, D = window_gradients(model, c, w)
            for g, p in zip(grads, model.parameters()):
                p.grad = g / D
            opt.step()
    return flat(model)


def aligned(c):
    return all(n % c["k"] == 0 for n in c["counts"])


def pytorch_worker(out_path):
    """One rank: every aligned configuration of this world size, in sequence."""
    rank = int(os.environ["RANK"])
    ws = int(os.environ["WORLD_SIZE"])
    dist.init_process_group("gloo", rank=rank, world_size=ws)
    from torch.distributed.algorithms.join import Join
    from torch.nn.parallel import DistributedDataParallel as DDP
    lines = []
    todo = lockstep_configs() if os.environ.get("ORACLE_SET") == "lockstep" else configs()
    for idx, c in enumerate(todo):
        if c["ws"] != ws or not aligned(c):
            continue
        if os.environ.get("JOIN_ORACLE_VERBOSE"):
            print("rank", rank, "config", idx, c, file=sys.stderr, flush=True)
        model = Net()
        ddp = DDP(model)
        opt = make_optimizer(c.get("optim", "sgd"), ddp.parameters())
        k = c["k"]
        threw = 0
        try:
            for _ in range(c["epochs"]):
                with Join([ddp], divide_by_initial_world_size=bool(c["divide"]),
                          throw_on_early_termination=bool(c["throw"])):
                    for i in range(c["counts"][rank]):
                        sync = (i + 1) % k == 0
                        with (contextlib.nullcontext() if sync else ddp.no_sync()):
                            x, y = batch(rank, i)
                            (F.mse_loss(ddp(x), y) / k).backward()
                        if sync:
                            opt.step()
                            opt.zero_grad()
        except RuntimeError as e:
            if not c["throw"]:
                raise
            threw = 1
        lines.append("%d %d %s\n" % (idx, threw, " ".join("%.17g" % v for v in flat(model).tolist())))
    lines.append("done\n")
    with open(out_path, "w") as f:
        f.writelines(lines)
    # Gloo's teardown at interpreter exit sometimes hangs the last rank; the
    # results are written, so leave at once (the parent also kills stragglers).
    dist.barrier()
    sys.stdout.flush()
    os._exit(0)


def run_pytorch(ws, tmpdir, oracle_set="matrix"):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    procs = []
    for r in range(ws):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(ws), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   ORACLE_SET=oracle_set)
        out = os.path.join(tmpdir, "%s_ws%d_rank%d.txt" % (oracle_set, ws, r))
        procs.append((subprocess.Popen([sys.executable, __file__, "--worker", out], env=env), out))
    import time
    deadline = time.time() + 900

    def complete(out):
        return os.path.exists(out) and open(out).read().endswith("done\n")

    while not all(complete(out) for _, out in procs):
        if any(p.poll() not in (None, 0) for p, _ in procs) or time.time() > deadline:
            for p, _ in procs:
                p.kill()
            raise SystemExit("pytorch worker failed or timed out (world size %d)" % ws)
        time.sleep(0.2)
    time.sleep(5)
    for p, _ in procs:
        if p.poll() is None:
            p.kill()
        p.wait()
    results = []
    for _, out in procs:
        with open(out) as f:
            results.append({int(l.split()[0]): (int(l.split()[1]), torch.tensor([float(v) for v in l.split()[2:]],
                                                                            dtype=torch.float64))
                            for l in f if l != "done\n"})
    return results


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--worker")
    ap.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "..", "fixtures", "join_matrix.txt"))
    ap.add_argument("--lockstep-out",
                    default=os.path.join(os.path.dirname(__file__), "..", "fixtures", "join_lockstep.txt"))
    args = ap.parse_args()
    if args.worker:
        return pytorch_worker(args.worker)
    import tempfile
    tmpdir = tempfile.mkdtemp()
    write_lockstep(args.lockstep_out, tmpdir)
    by_ws = {ws: run_pytorch(ws, tmpdir) for ws in sorted({ws for ws, _ in PATTERNS})}
    lines = ["# Generated by tests/python/join_oracle.py (torch %s); do not edit.\n" % torch.__version__,
             "# ws counts k divide throw epochs reference params...\n"]
    checked = 0
    for idx, c in enumerate(configs()):
        ref = window_rule(c)
        source = "window_rule"
        if aligned(c):
            for r, per_rank in enumerate(by_ws[c["ws"]]):
                threw, params = per_rank[idx]
                assert threw == c["throw"] or min(c["counts"]) == max(c["counts"]), (c, r, threw)
                err = (params - ref).abs().max().item()
                assert err < 1e-9, (c, r, err)
            checked += 1
            source = "pytorch+window_rule"
        lines.append("%d %s %d %d %d %d %s %s\n" % (c["ws"], ",".join(map(str, c["counts"])), c["k"], c["divide"],
                                                    c["throw"], c["epochs"], source,
                                                    " ".join("%.17g" % v for v in ref.tolist())))
    with open(args.out, "w") as f:
        f.writelines(lines)
    print("%d configurations, %d checked against PyTorch DDP + Join; wrote %s" % (len(configs()), checked, args.out))


def write_lockstep(path, tmpdir):
    by_ws = {ws: run_pytorch(ws, tmpdir, "lockstep") for ws in sorted({ws for ws, _ in LOCKSTEP_PATTERNS})}
    lines = ["# Generated by tests/python/join_oracle.py (torch %s); do not edit.\n" % torch.__version__,
             "# ws counts k divide epochs optim mode params...\n"]
    differ = 0
    for idx, c in enumerate(lockstep_configs()):
        head = "%d %s %d %d %d %s" % (c["ws"], ",".join(map(str, c["counts"])), c["k"], c["divide"], c["epochs"],
                                      c["optim"])
        lockstep = window_rule_optimizer(c)
        lines.append("%s lockstep %s\n" % (head, " ".join("%.17g" % v for v in lockstep.tolist())))
        if aligned(c):
            per_rank = [results[idx][1] for results in by_ws[c["ws"]]]
            for params in per_rank[1:]:  # the final broadcast: every rank holds the same model
                assert (params - per_rank[0]).abs().max().item() == 0.0, c
            if c["optim"] == "sgd":  # stateless: PyTorch's Join and lockstep agree
                assert (per_rank[0] - lockstep).abs().max().item() < 1e-9, c
            differ += int((per_rank[0] - lockstep).abs().max().item() > 1e-9)
            lines.append("%s pytorch %s\n" % (head, " ".join("%.17g" % v for v in per_rank[0].tolist())))
    with open(path, "w") as f:
        f.writelines(lines)
    print("%d configurations; %d where PyTorch's Join differs from lockstep; wrote %s" %
          (len(lockstep_configs()), differ, path))


if __name__ == "__main__":
    main()
