"""PyTorch's learning-rate schedulers, the oracle of lightning-cpp's (core/lr_scheduler.h).

Prints, for each case, the learning rate (and momentum, or Adam's beta1) of each of two param groups after
construction and after each of its steps, one line per step: "<case> <step> <lr0> <lr1> <momentum0>", each
value with repr's 17 significant digits. ReduceLROnPlateau steps on a fixed metric sequence (METRICS).
tests/core/lr_scheduler_test.cpp builds the same cases in C++ and compares.
"""
import torch
from torch.optim import lr_scheduler as S

STEPS = 40
# A loss that improves, stalls, improves a little, then stalls (ReduceLROnPlateau's input, step i's value).
METRICS = [1.0 - 0.05 * i for i in range(8)] + [0.65] * 10 + [0.64, 0.6399] + [0.6399] * 20


def optimizer(kind):
    params = [torch.nn.Parameter(torch.zeros(2)), torch.nn.Parameter(torch.zeros(2))]
    groups = [{"params": [params[0]]}, {"params": [params[1]], "lr": 0.05}]
    if kind == "adam":
        return torch.optim.Adam(groups, lr=0.1, betas=(0.9, 0.999))
    return torch.optim.SGD(groups, lr=0.1, momentum=0.9)


def momentum(group):
    return group["betas"][0] if "betas" in group else group["momentum"]


CASES = {
    "step": ("sgd", lambda o: S.StepLR(o, step_size=3, gamma=0.5)),
    "multistep": ("sgd", lambda o: S.MultiStepLR(o, milestones=[5, 12, 12, 30], gamma=0.3)),
    "exponential": ("sgd", lambda o: S.ExponentialLR(o, gamma=0.9)),
    "cosine": ("sgd", lambda o: S.CosineAnnealingLR(o, T_max=15, eta_min=0.001)),
    "cosine_restarts": ("sgd", lambda o: S.CosineAnnealingWarmRestarts(o, T_0=4, T_mult=2, eta_min=0.002)),
    "linear": ("sgd", lambda o: S.LinearLR(o, start_factor=0.1, end_factor=1.0, total_iters=6)),
    "one_cycle": ("sgd", lambda o: S.OneCycleLR(o, max_lr=[1.0, 0.5], total_steps=STEPS)),
    "one_cycle_linear_3phase_adam": ("adam", lambda o: S.OneCycleLR(
        o, max_lr=0.3, total_steps=STEPS, pct_start=0.25, anneal_strategy="linear", three_phase=True,
        div_factor=10.0, final_div_factor=100.0, base_momentum=0.8, max_momentum=0.95)),
    "warmup_cosine": ("sgd", lambda o: S.SequentialLR(o, [S.LinearLR(o, start_factor=0.01, total_iters=5),
                                                          S.CosineAnnealingLR(o, T_max=20, eta_min=0.0)],
                                                      milestones=[5])),
    "plateau": ("sgd", lambda o: S.ReduceLROnPlateau(o, mode="min", factor=0.5, patience=2, threshold=1e-2,
                                                     threshold_mode="rel", cooldown=1, min_lr=[0.01, 0.004])),
    "plateau_max_abs": ("sgd", lambda o: S.ReduceLROnPlateau(o, mode="max", factor=0.1, patience=1,
                                                             threshold=0.05, threshold_mode="abs")),
}


def main():
    for name, (kind, make) in CASES.items():
        o = optimizer(kind)
        s = make(o)
        steps = STEPS - 1 if name.startswith("one_cycle") else STEPS  # OneCycle has total_steps - 1 steps after init

        def line(i):
            g = o.param_groups
            print(name, i, repr(g[0]["lr"]), repr(g[1]["lr"]), repr(momentum(g[0])))

        line(0)
        for i in range(1, steps + 1):
            o.step()
            if isinstance(s, S.ReduceLROnPlateau):
                value = METRICS[i - 1]
                s.step(-value if name == "plateau_max_abs" else value)
            else:
                s.step()
            line(i)


if __name__ == "__main__":
    main()
