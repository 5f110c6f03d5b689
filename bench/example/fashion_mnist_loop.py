"""The Fashion-MNIST example's work as a Python user writes it without Lightning.

The same work as build/examples/fashion_mnist/fashion_mnist (examples/fashion_mnist): the MLP
784-256-256-10, Adam 1e-3, batch 64, a fixed 55000/5000 split of the training images, 3 epochs
each followed by validation (batches of 256), then the test set; torch's own TensorDataset and
DataLoader, as its tutorials do. Prints the test accuracy. Run by bench/example/example_bench.
"""
import gzip
import sys

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

DATA = "/usr/share/datasets/fashion-mnist"
EPOCHS = 3


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return torch.from_numpy(np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape).copy())


def load(train):
    prefix = f"{DATA}/{'train' if train else 't10k'}"
    images = read_idx(f"{prefix}-images-idx3-ubyte.gz").float().div_(255).sub_(0.2860).div_(0.3530).unsqueeze(1)
    return images, read_idx(f"{prefix}-labels-idx1-ubyte.gz").long()


class Mlp(nn.Module):
    def __init__(self):
        super().__init__()
        self.fc1, self.fc2, self.fc3 = nn.Linear(784, 256), nn.Linear(256, 256), nn.Linear(256, 10)

    def forward(self, x):
        x = x.flatten(1)
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def evaluate(model, loader):
    model.eval()
    loss, correct, n = 0.0, 0, 0
    with torch.no_grad():
        for x, y in loader:
            logits = model(x)
            loss += F.cross_entropy(logits, y, reduction="sum").item()
            correct += (logits.argmax(1) == y).sum().item()
            n += len(y)
    model.train()
    return loss / n, correct / n


def main():
    torch.manual_seed(0)
    images, labels = load(True)
    perm = torch.randperm(len(images), generator=torch.Generator().manual_seed(1234))
    train, val = perm[:-5000], perm[-5000:]
    train_loader = DataLoader(TensorDataset(images[train], labels[train]), batch_size=64, shuffle=True)
    val_loader = DataLoader(TensorDataset(images[val], labels[val]), batch_size=256)
    del images, labels
    model = Mlp()
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-3)
    for epoch in range(EPOCHS):
        for x, y in train_loader:
            loss = F.cross_entropy(model(x), y)
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
        val_loss, val_acc = evaluate(model, val_loader)
        print(f"epoch {epoch}: train_loss {loss.item():.4f} val_loss {val_loss:.4f} val_acc {val_acc:.4f}")
    test_images, test_labels = load(False)
    test_loss, test_acc = evaluate(model, DataLoader(TensorDataset(test_images, test_labels), batch_size=256))
    print(f"MLP test accuracy: {test_acc:.4f} (test loss {test_loss:.4f})")


if __name__ == "__main__":
    if len(sys.argv) > 1:
        DATA = sys.argv[1]
    if len(sys.argv) > 2:
        EPOCHS = int(sys.argv[2])
    main()
