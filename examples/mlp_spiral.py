"""A small MLP classifier on a three-arm spiral, written as a PyTorch script would be.

The model is a custom ``nn.Module`` (2-64-64-3 with ReLU), trained full-batch with
``nn.CrossEntropyLoss`` and ``optim.Adam``; the data are generated with NumPy from a fixed
seed, so every run sees the same spiral.

Run: python examples/mlp_spiral.py
"""
import time

import numpy as np

import tapejit as torch
from tapejit import nn, optim


def make_spiral(points_per_arm=100, arms=3, noise=0.2, seed=0):
    """Points on ``arms`` interleaved spiral arms in the plane (the CS231n toy dataset):
    ``(features float32 (n, 2), labels int64 (n,))``."""
    rng = np.random.default_rng(seed)
    features, labels = [], []
    for arm in range(arms):
        radius = np.linspace(0.0, 1.0, points_per_arm)
        angle = (np.linspace(arm * 4.0, (arm + 1) * 4.0, points_per_arm)
                 + rng.normal(0.0, noise, points_per_arm))
        features.append(np.stack([radius * np.sin(angle), radius * np.cos(angle)], axis=1))
        labels.append(np.full(points_per_arm, arm))
    return np.concatenate(features).astype(np.float32), np.concatenate(labels).astype(np.int64)


class MLP(nn.Module):
    def __init__(self, n_in=2, hidden=64, n_classes=3):
        super().__init__()
        self.fc1 = nn.Linear(n_in, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.out = nn.Linear(hidden, n_classes)
        self.act = nn.ReLU()

    def forward(self, x):
        x = self.act(self.fc1(x))
        x = self.act(self.fc2(x))
        return self.out(x)   # logits: CrossEntropyLoss applies log-softmax itself


def train(epochs=300, lr=1e-2, seed=0, log_every=50):
    """Train on the spiral for ``epochs`` full-batch Adam steps; returns the
    ``(loss, accuracy)`` of every epoch."""
    torch.manual_seed(seed)
    features, labels = make_spiral(seed=seed)
    x, y = torch.from_numpy(features), torch.from_numpy(labels)
    model = MLP()
    loss_fn = nn.CrossEntropyLoss()
    optimizer = optim.Adam(model.parameters(), lr=lr)
    history = []
    for epoch in range(epochs):
        logits = model(x)
        loss = loss_fn(logits, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        # accuracy of the logits this step's loss was computed from (before the update)
        accuracy = (logits.argmax(dim=1) == y).float().mean().item()
        history.append((loss.item(), accuracy))
        if log_every and (epoch % log_every == 0 or epoch == epochs - 1):
            print(f"epoch {epoch:4d}  loss {loss.item():.4f}  accuracy {accuracy:6.1%}")
    return history


if __name__ == "__main__":
    start = time.perf_counter()
    history = train()
    print(f"final training accuracy {history[-1][1]:.1%} in {time.perf_counter() - start:.1f} s")
