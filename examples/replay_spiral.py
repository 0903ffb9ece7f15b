"""The spiral classifier of ``mlp_spiral.py``, trained with a replayed step (``tj.compile``).

The training step is the usual PyTorch one; ``@torch.compile`` traces it on the first
call and replays its tape in Numba on every later call.  ``optimizer.step()`` stays
outside the compiled step: every replay reads the parameters live.  The script trains
the same model from the same start eagerly and replayed and prints both times.

Run: python examples/replay_spiral.py
"""
import time

import numpy as np

import tapejit as torch
from tapejit import nn, optim

from mlp_spiral import MLP, make_spiral


def train(compiled, steps=300, seed=0):
    """``(losses, accuracy, seconds)`` of full-batch Adam training, eager or replayed."""
    torch.manual_seed(seed)
    features, labels = make_spiral()
    x, y = torch.from_numpy(features), torch.from_numpy(labels)
    model = MLP()
    optimizer = optim.Adam(model.parameters(), lr=0.01)
    loss_fn = nn.CrossEntropyLoss()

    def step(x, y):
        optimizer.zero_grad()
        loss = loss_fn(model(x), y)
        loss.backward()
        return loss

    run = torch.compile(step) if compiled else step
    losses = []
    start = time.perf_counter()
    for _ in range(steps):
        losses.append(run(x, y).item())
        optimizer.step()
    seconds = time.perf_counter() - start
    with torch.no_grad():
        accuracy = float((model(x).argmax(dim=1) == y).float().mean())
    return losses, accuracy, seconds


if __name__ == "__main__":
    train(compiled=False, steps=2)   # the first gradient compiles the sweeps: keep it out of the timings
    eager_losses, eager_accuracy, eager_time = train(compiled=False)
    replay_losses, replay_accuracy, replay_time = train(compiled=True)
    print(f"eager:    loss {eager_losses[0]:.3f} -> {eager_losses[-1]:.4f}, "
          f"accuracy {eager_accuracy:.1%}, {eager_time:.2f} s")
    print(f"replayed: loss {replay_losses[0]:.3f} -> {replay_losses[-1]:.4f}, "
          f"accuracy {replay_accuracy:.1%}, {replay_time:.2f} s (first call traces)")
    print(f"largest loss difference over the run: "
          f"{np.max(np.abs(np.array(replay_losses) - eager_losses)):.2e}")
