"""Checkpoint interop with Python's torch (run with /usr/bin/python3, Debian's python3-torch).

  checkpoint_interop.py read <ckpt> <out>     torch.load a lightning-cpp checkpoint; write its names
                                              (one per line: name dtype shape) to <out>.names and
                                              torch.save its state_dict back to <out>
  checkpoint_interop.py write <out_state> <out_io>
                                              build the reference net in PyTorch, torch.save its
                                              state_dict and {input, output} for the C++ side
"""
import sys
import torch
from torch import nn


class Reference(nn.Module):
    """Same layout as the C++ Reference in tests/checkpoint_test.cpp."""

    def __init__(self):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(4, 8), nn.BatchNorm1d(8), nn.ReLU())
        self.head = nn.Linear(8, 2)

    def forward(self, x):
        return self.head(self.encoder(x))


def read(ckpt_path, out_path):
    ckpt = torch.load(ckpt_path)
    assert isinstance(ckpt, dict), type(ckpt)
    for key in ("state_dict", "epoch", "epoch_finished", "global_step", "optimizer", "callbacks", "hparams"):
        assert key in ckpt, key
    # Lightning's "epoch": the epoch during which it was saved (last.ckpt of a
    # 2-epoch fit: at the end of epoch 1), whether finished kept apart.
    assert ckpt["epoch"] == 1 and ckpt["epoch_finished"] is True, (ckpt["epoch"], ckpt["epoch_finished"])
    # Hyperparameters keep their types (Reference in tests/checkpoint_test.cpp).
    hparams = ckpt["hparams"]
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
    # A plain dict: LibTorch 1.13's unpickler cannot read collections.OrderedDict.
    torch.save(dict(model.state_dict()), state_path)
    torch.save(model.state_dict(), state_path + ".ordered")
    torch.save({"input": x, "output": y}, io_path)


if __name__ == "__main__":
    {"read": read, "write": write}[sys.argv[1]](*sys.argv[2:])
