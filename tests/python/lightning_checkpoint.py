"""Lightning 2.6 on the other side of our checkpoints (the venv's Python: PyTorch 2.11, pytorch-lightning 2.6).

The model, data and optimizer are those of tests/trainer/lightning_checkpoint_test.cpp's LightningMlp: the
same names (fc1, fc2), the same hyper-parameters (hidden, lr), Adam under StepLR(step_size=1, gamma=0.5) per
epoch, cross-entropy on 40 fixed samples in batches of 8 (5 per epoch, not shuffled).

  lightning_checkpoint.py fit <dir> <max_epochs> [<ckpt>]
      Lightning's Trainer fits the model (from <ckpt> with fit(ckpt_path=...), after checking that
      load_from_checkpoint builds the module from it with its hyper-parameters and weights), writing a
      checkpoint at each epoch's end to <dir> (ModelCheckpoint: epoch=E-step=S.ckpt). Prints "resumed epoch E
      step S lr X" as the resumed Trainer stands when training starts, and "fit epoch E step S" at its end.
  lightning_checkpoint.py same <a> <b> <tol>
      Two checkpoints of that model stand at the same place: epoch, global_step, the scheduler's last_epoch and
      the learning rate equal; the weights and Adam's state (step, exp_avg, exp_avg_sq) within <tol>. Exits 1
      naming the first difference.
"""
import os
import sys
import warnings

import torch
from torch import nn

warnings.filterwarnings("ignore")
os.environ.setdefault("PL_DISABLE_FORK", "1")
import pytorch_lightning as pl  # noqa: E402


class LightningMlp(pl.LightningModule):
    def __init__(self, hidden=16, lr=0.01):
        super().__init__()
        self.save_hyperparameters()
        self.fc1 = nn.Linear(4, hidden)
        self.fc2 = nn.Linear(hidden, 3)

    def forward(self, x):
        return self.fc2(torch.relu(self.fc1(x)))

    def training_step(self, batch, batch_idx):
        x, y = batch
        return nn.functional.cross_entropy(self(x), y)

    def configure_optimizers(self):
        optimizer = torch.optim.Adam(self.parameters(), lr=self.hparams.lr)
        scheduler = torch.optim.lr_scheduler.StepLR(optimizer, step_size=1, gamma=0.5)
        return {"optimizer": optimizer, "lr_scheduler": {"scheduler": scheduler, "interval": "epoch"}}


def data():
    n = 40
    x = torch.sin(torch.arange(n * 4, dtype=torch.float32) * 0.37).reshape(n, 4)
    y = torch.arange(n) % 3
    return torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=8, shuffle=False)


class Report(pl.Callback):
    def on_train_start(self, trainer, module):
        lr = trainer.optimizers[0].param_groups[0]["lr"]
        print(f"resumed epoch {trainer.current_epoch} step {trainer.global_step} lr {lr!r}", flush=True)


def fit(folder, max_epochs, ckpt=None):
    if ckpt is None:
        torch.manual_seed(0)
        model = LightningMlp()
    else:
        saved = torch.load(ckpt, weights_only=True)
        model = LightningMlp.load_from_checkpoint(ckpt)
        assert dict(model.hparams) == saved["hyper_parameters"], (dict(model.hparams), saved["hyper_parameters"])
        for name, value in model.state_dict().items():
            assert torch.equal(value, saved["state_dict"][name]), name
        print(f"loaded hparams {dict(sorted(model.hparams.items()))}", flush=True)
    checkpoint = pl.callbacks.ModelCheckpoint(dirpath=folder, save_top_k=-1, every_n_epochs=1)
    trainer = pl.Trainer(max_epochs=max_epochs, logger=False, enable_progress_bar=False, enable_model_summary=False,
                         callbacks=[checkpoint, Report()], num_sanity_val_steps=0, accelerator="cpu", devices=1)
    trainer.fit(model, data(), ckpt_path=ckpt)
    print(f"fit epoch {trainer.current_epoch} step {trainer.global_step}", flush=True)


def same(a_path, b_path, tol):
    a, b = torch.load(a_path, weights_only=True), torch.load(b_path, weights_only=True)
    tol = float(tol)
    for key in ("epoch", "global_step"):
        if a[key] != b[key]:
            sys.exit(f"{key}: {a[key]} against {b[key]}")
    if a["lr_schedulers"][0]["last_epoch"] != b["lr_schedulers"][0]["last_epoch"]:
        sys.exit(f"lr_schedulers[0].last_epoch: {a['lr_schedulers'][0]['last_epoch']} against "
                 f"{b['lr_schedulers'][0]['last_epoch']}")

    def close(x, y, where):
        x, y = torch.as_tensor(x, dtype=torch.float64), torch.as_tensor(y, dtype=torch.float64)
        if x.shape != y.shape:
            sys.exit(f"{where}: shape {list(x.shape)} against {list(y.shape)}")
        differ = (x - y).abs().max().item() if x.numel() else 0.0
        if differ > tol:
            sys.exit(f"{where}: differs by {differ}")

    if sorted(a["state_dict"]) != sorted(b["state_dict"]):
        sys.exit(f"state_dict: {sorted(a['state_dict'])} against {sorted(b['state_dict'])}")
    for name in a["state_dict"]:
        close(a["state_dict"][name], b["state_dict"][name], f"state_dict[{name!r}]")
    oa, ob = a["optimizer_states"][0], b["optimizer_states"][0]
    close(oa["param_groups"][0]["lr"], ob["param_groups"][0]["lr"], "optimizer_states[0].param_groups[0].lr")
    if sorted(oa["state"]) != sorted(ob["state"]):
        sys.exit(f"optimizer_states[0].state: {sorted(oa['state'])} against {sorted(ob['state'])}")
    for index in oa["state"]:
        for name in ("step", "exp_avg", "exp_avg_sq"):
            close(oa["state"][index][name], ob["state"][index][name], f"optimizer_states[0].state[{index}][{name}]")
    print(f"same at epoch {a['epoch']} step {a['global_step']}: {len(a['state_dict'])} tensors, "
          f"{len(oa['state'])} optimizer states within {tol}")


if __name__ == "__main__":
    if sys.argv[1] == "fit":
        fit(sys.argv[2], int(sys.argv[3]), sys.argv[4] if len(sys.argv) > 4 else None)
    elif sys.argv[1] == "same":
        same(sys.argv[2], sys.argv[3], sys.argv[4])
    else:
        sys.exit(f"unknown command {sys.argv[1]}")
