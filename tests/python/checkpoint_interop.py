"""Checkpoint interop with Python's torch (run with /usr/bin/python3, Debian's python3-torch).

  checkpoint_interop.py read <ckpt> <out>     torch.load a lightning-cpp checkpoint; write its names
                                              (one per line: name dtype shape) to <out>.names and
                                              torch.save its state_dict back to <out>
  checkpoint_interop.py write <out_state> <out_io>
                                              build the reference net in PyTorch, torch.save its
                                              state_dict (also as an OrderedDict, <out_state>.ordered,
                                              and as if from a GPU, <out_state>.cuda) and
                                              {input, output} for the C++ side
  checkpoint_interop.py step <ckpt> <io> <out>
                                              load a checkpoint's weights and optimizer state into the
                                              reference net and torch.optim.Adam, take one step on
                                              <io>'s {input, target} (eval mode: no dropout) and
                                              torch.save {"state_dict", "optimizer"} to <out>
  checkpoint_interop.py same <a> <b> <tol>    torch.load both checkpoints: the same state_dict keys,
                                              optimizer param_groups and state keys, every tensor
                                              within <tol>; exit 1 naming the first difference
"""
import sys
import torch
from torch import nn


class Reference(nn.Module):
    """Same layout as the C++ Reference in tests/support/checkpoint_fixture.h."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def read(ckpt_path, out_path):
    ckpt = torch.load(ckpt_path)
    assert isinstance(ckpt, dict), type(ckpt)
    for key in ("state_dict", "epoch", "epoch_finished", "global_step", "optimizer_states", "lr_schedulers", "loops",
                "callbacks", "hyper_parameters"):
        assert key in ckpt, key
    # Lightning's "epoch": the epoch during which it was saved (last.ckpt of a
    # 2-epoch fit: at the end of epoch 1), whether finished kept apart.
    assert ckpt["epoch"] == 1 and ckpt["epoch_finished"] is True, (ckpt["epoch"], ckpt["epoch_finished"])
    # Hyperparameters keep their types (Reference in tests/support/checkpoint_fixture.h).
    hparams = ckpt["hyper_parameters"]
    assert hparams == {"width": 8, "lr": 0.01, "amsgrad": False, "name": "reference"}, hparams
    assert [type(hparams[k]) for k in ("width", "lr", "amsgrad", "name")] == [int, float, bool, str], hparams
    state = ckpt["state_dict"]
    assert all(isinstance(v, torch.Tensor) for v in state.values())
    # The names are what PyTorch uses: the reference net accepts the state_dict as is.
    model = Reference()
    model.load_state_dict(state, strict=True)
    with open(out_path + ".names", "w") as f:
        for name, t in state.items():
            f.write(f"{name} {t.dtype} {list(t.shape)} {float(t.double().sum()):.17g}\n")
    torch.save(dict(state), out_path)


def write(state_path, io_path):
    torch.manual_seed(123)
    model = Reference()
    model.train()
    for _ in range(3):  # give BatchNorm non-trivial running stats
        model(torch.randn(16, 4))
    model.eval()
    x = torch.randn(5, 4)
    with torch.no_grad():
        y = model(x)
    # A plain dict, and Python's OrderedDict with its _metadata (which our reader rewrites for LibTorch's unpickler).
    torch.save(dict(model.state_dict()), state_path)
    torch.save(model.state_dict(), state_path + ".ordered")
    # As written from a GPU (its tensors' place cuda:0), made without one: torch.save asks location_tag.
    location_tag = torch.serialization.location_tag
    torch.serialization.location_tag = lambda storage: "cuda:0"
    try:
        torch.save(dict(model.state_dict()), state_path + ".cuda")
    finally:
        torch.serialization.location_tag = location_tag
    torch.save({"input": x, "output": y}, io_path)


def step(ckpt_path, io_path, out_path):
    ckpt = torch.load(ckpt_path)
    model = Reference()
    model.load_state_dict(ckpt["state_dict"], strict=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1.0)
    # PyTorch's layout, PyTorch's names: load_state_dict takes it as is.
    optimizer.load_state_dict(ckpt["optimizer_states"][0])
    group = optimizer.param_groups[0]
    # Saved at the end of the second epoch under StepLR(step_size=1, gamma=0.7) from 0.01, as the C++
    # Reference: both epochs' scheduler steps taken (Lightning's too: after the epoch's last batch).
    assert abs(group["lr"] - 0.01 * 0.7 * 0.7) < 1e-12, group["lr"]
    assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8 and group["amsgrad"] is False, group
    assert len(optimizer.state) == len(list(model.parameters())), len(optimizer.state)
    io = torch.load(io_path)
    model.eval()
    loss = nn.functional.mse_loss(model(io["input"]), io["target"])
    optimizer.zero_grad()
    loss.backward()
    optimizer.step()
    state = optimizer.state_dict()
    torch.save(state, out_path + ".list")
    # LibTorch 1.13's unpickler cannot read a list of one element (pickle's APPEND): one group, as a tuple.
    state["param_groups"] = tuple(state["param_groups"])
    torch.save({"state_dict": dict(model.state_dict()), "optimizer": state}, out_path)


def same(a_path, b_path, tol):
    a, b = torch.load(a_path), torch.load(b_path)
    tol = float(tol)

    def compare(x, y, where):
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                sys.exit(f"{where}: a tensor in one checkpoint only")
            if x.shape != y.shape or x.dtype != y.dtype:
                sys.exit(f"{where}: {x.dtype}{list(x.shape)} against {y.dtype}{list(y.shape)}")
            differ = (x.double() - y.double()).abs().max().item() if x.numel() else 0.0
            if differ > tol:
                sys.exit(f"{where}: differs by {differ}")
        elif isinstance(x, dict) and isinstance(y, dict):
            if list(x.keys()) != list(y.keys()):
                sys.exit(f"{where}: keys {list(x.keys())} against {list(y.keys())}")
            for k in x:
                compare(x[k], y[k], f"{where}[{k!r}]")
        elif isinstance(x, (list, tuple)) and isinstance(y, (list, tuple)):
            if len(x) != len(y):
                sys.exit(f"{where}: {len(x)} items against {len(y)}")
            for i, (u, v) in enumerate(zip(x, y)):
                compare(u, v, f"{where}[{i}]")
        elif x != y:
            sys.exit(f"{where}: {x!r} against {y!r}")

    compare(a["state_dict"], b["state_dict"], "state_dict")
    # Python's own (step) or ours, before Lightning's layout ("optimizer") or in it ("optimizer_states").
    def optimizer(ckpt):
        return ckpt["optimizer_states"][0] if "optimizer_states" in ckpt else ckpt["optimizer"]

    compare(optimizer(a), optimizer(b), "optimizer")
    print("same", len(a["state_dict"]), "tensors,", len(optimizer(a)["state"]), "optimizer states")


if __name__ == "__main__":
    {"read": read, "write": write, "step": step, "same": same}[sys.argv[1]](*sys.argv[2:])
