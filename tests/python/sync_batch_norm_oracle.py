#!/usr/bin/python3
"""Reference parameters for tests/plugins/join/sync_batch_norm_test.cpp (JoinSyncBatchNorm.*).

Writes tests/fixtures/sync_batch_norm.txt: a model with a synced batch norm,
Linear(3, 4) -> BatchNorm(4) -> tanh -> Linear(4, 1) in float64, trained by
DDP on uneven ranks under lockstep Join, computed as one process would:

  iteration i: the ranks with a batch i run forward as ONE batch norm over the
  union of their batches (training statistics of the union; the running
  statistics advance once, with the union's unbiased variance); the loss is
  sum over those ranks of mse(rank's part) / (D * k), D = world size; the
  gradients of window w = iterations [w*k, (w+1)*k) accumulate, one SGD step
  (lr 0.1) per window; iterations where no rank has a batch do nothing.

That is SyncBatchNorm's definition: PyTorch's nn.SyncBatchNorm computes the
union's statistics across ranks, but 1.13 runs it on CUDA only ("SyncBatchNorm
expected input tensor to be on GPU"), so on this CPU the oracle is
nn.BatchNorm1d on the union batch, the same computation in one process.
Each line: world size, per-rank batch counts, k, epochs, then the parameters
(named_parameters order) and the running mean and variance.

Run with Debian's python3-torch 1.13: /usr/bin/python3 tests/python/sync_batch_norm_oracle.py
The data and initial weights are join_oracle.py's (and join_oracle.h's).
"""
import os

import torch
import torch.nn.functional as F

from join_oracle import HIDDEN, IN, LR, batch, init_params

CONFIGS = [
    (2, [3, 3], 1, 2),  # even
    (2, [2, 5], 1, 2),
    (2, [3, 3], 2, 1),  # iteration 3 is padding on every rank
    (3, [1, 4, 3], 2, 2),
    (3, [0, 3, 2], 1, 1),  # rank 0 never has a batch
]


class Net(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.l1 = torch.nn.Linear(IN, HIDDEN)
        self.bn = torch.nn.BatchNorm1d(HIDDEN)
        self.l2 = torch.nn.Linear(HIDDEN, 1)
        init_params(self)


def train(ws, counts, k, epochs):
    model = Net()
    opt = torch.optim.SGD(model.parameters(), lr=LR)
    longest = max(counts)
    iterations = (longest + k - 1) // k * k
    for _ in range(epochs):
        opt.zero_grad()
        for it in range(iterations):
            ranks = [r for r in range(ws) if it < counts[r]]
            if ranks:
                xs, ys = zip(*(batch(r, it) for r in ranks))
                out = model.l2(torch.tanh(model.bn(model.l1(torch.cat(xs)))))
                parts = out.split([x.shape[0] for x in xs])
                loss = sum(F.mse_loss(p, y) for p, y in zip(parts, ys)) / (ws * k)
                loss.backward()
            if (it + 1) % k == 0:
                opt.step()
                opt.zero_grad()
    values = [p.detach().reshape(-1) for p in model.parameters()]
    values += [model.bn.running_mean, model.bn.running_var]
    return torch.cat(values).tolist()


def main():
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "fixtures", "sync_batch_norm.txt")
    with open(path, "w") as f:
        f.write("# written by tests/python/sync_batch_norm_oracle.py: ws counts k epochs params... running_mean "
                "running_var\n")
        for ws, counts, k, epochs in CONFIGS:
            values = " ".join(repr(v) for v in train(ws, counts, k, epochs))
            f.write(f"{ws} {','.join(map(str, counts))} {k} {epochs} {values}\n")
    print(f"wrote {len(CONFIGS)} configurations to {os.path.normpath(path)}")


if __name__ == "__main__":
    main()
