"""Checks a lightning-cpp lr_find sweep against Lightning 2.6's own code.

Usage: lr_find_oracle.py RESULTS MIN_LR MAX_LR NUM_TRAINING MODE THRESHOLD SUGGESTED_INDEX

RESULTS: a CSV of the sweep (lr, raw_loss, loss per line, a header first), as
tests/tuner/lr_finder_test.cpp writes it; THRESHOLD: early_stop_threshold or
"none"; SUGGESTED_INDEX: lightning-cpp's suggestion index, or -1 for none.
Checks, with Lightning's classes (pytorch_lightning.tuner.lr_finder):
  - the rates: those _ExponentialLR / _LinearLR give an optimizer, step by step;
  - the smoothed losses and where the sweep stopped: _LRCallback.on_train_batch_end
    fed the raw losses (a stand-in trainer: global step, should_stop, broadcast);
  - the suggestion: _LRFinder.suggestion() on the sweep's results.
Prints what differs and exits 1, or prints "ok" and exits 0.
"""
import csv
import math
import sys
import types

import torch
from pytorch_lightning.tuner.lr_finder import _ExponentialLR, _LinearLR, _LRCallback, _LRFinder


def main():
    path, min_lr, max_lr, num_training, mode, threshold, index = sys.argv[1:8]
    min_lr, max_lr, num_training, index = float(min_lr), float(max_lr), int(num_training), int(index)
    threshold = None if threshold == "none" else float(threshold)
    with open(path) as f:
        rows = list(csv.DictReader(f))
    lrs = [float(r["lr"]) for r in rows]
    raw = [float(r["raw_loss"]) for r in rows]
    losses = [float(r["loss"]) for r in rows]
    problems = []

    # The rates, as the lr finder's scheduler sets them on an optimizer.
    param = torch.zeros(1, requires_grad=True)
    optimizer = torch.optim.SGD([param], lr=min_lr)
    for group in optimizer.param_groups:
        group["initial_lr"] = min_lr
    scheduler = (_LinearLR if mode == "linear" else _ExponentialLR)(optimizer, max_lr, num_training)
    for k, lr in enumerate(lrs):
        expected = scheduler.lr[0]
        if not math.isclose(lr, expected, rel_tol=1e-12):
            problems.append(f"step {k}: rate {lr!r}, Lightning's {expected!r}")
        optimizer.step()
        scheduler.step()

    # The smoothing and the stop, by Lightning's callback on the raw losses.
    callback = _LRCallback(num_training, threshold, progress_bar_refresh_rate=0)
    trainer = types.SimpleNamespace(
        fit_loop=types.SimpleNamespace(batch_idx=0), accumulate_grad_batches=1, global_step=0, should_stop=False,
        strategy=types.SimpleNamespace(broadcast=lambda x: x))
    stopped_at = None
    for k, loss in enumerate(raw):
        trainer.global_step = k + 1
        callback.on_train_batch_end(trainer, None, torch.tensor(loss, dtype=torch.float64), None, k)
        if trainer.should_stop and stopped_at is None:
            stopped_at = k
    for k, (ours, theirs) in enumerate(zip(losses, callback.losses)):
        if not (math.isclose(ours, theirs, rel_tol=1e-12) or (math.isnan(ours) and math.isnan(theirs))):
            problems.append(f"step {k}: smoothed loss {ours!r}, Lightning's {theirs!r}")
    expected_steps = num_training if stopped_at is None else stopped_at + 1
    if len(rows) != expected_steps:
        problems.append(f"{len(rows)} steps, Lightning's callback stops after {expected_steps}")

    # The suggestion, by Lightning's _LRFinder on these results.
    finder = _LRFinder(mode, min_lr, max_lr, num_training)
    finder.results = {"lr": lrs, "loss": losses}
    finder.suggestion()
    theirs = -1 if finder._optimal_idx is None else finder._optimal_idx
    if theirs != index:
        problems.append(f"suggestion index {index}, Lightning's {theirs}")
    print("\n".join(problems) if problems else "ok")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
