"""A custom ``tj.autograd.Function``: a numerically stable LogSumExp with its own backward.

``LogSumExp.forward`` subtracts the row maximum before exponentiating (so logits of 1000
do not overflow) and saves the input and the result with ``ctx.save_for_backward``;
``backward`` returns ``grad * softmax(x)``, computed from what was saved.  The function is
checked against finite differences with ``tj.autograd.gradcheck``, then used as the
log-partition of a small softmax classifier, whose backward graph is printed as Mermaid.

Run: python examples/custom_function.py
"""
import numpy as np

import tapejit as tj
from tapejit import nn


class LogSumExp(tj.autograd.Function):
    """log(sum(exp(x), dim=-1)) for a 2-d ``x``, one value per row."""

    @staticmethod
    def forward(ctx, x):
        row_max = x.amax(dim=-1, keepdim=True)
        result = (x - row_max).exp().sum(dim=-1).log() + row_max.squeeze(-1)
        ctx.save_for_backward(x, result)
        return result

    @staticmethod
    def backward(ctx, grad):
        x, result = ctx.saved_tensors
        softmax = (x - result.unsqueeze(-1)).exp()   # exp(x - logsumexp(x)): never overflows
        return grad.unsqueeze(-1) * softmax


class SoftmaxRegression(nn.Module):
    """A linear classifier whose cross-entropy uses the custom LogSumExp."""

    def __init__(self, n_features, n_classes):
        super().__init__()
        self.linear = nn.Linear(n_features, n_classes)

    def forward(self, x):
        return self.linear(x)

    def loss(self, x, labels):
        logits = self(x)
        picked = logits.gather(1, labels.unsqueeze(1)).squeeze(1)
        return (LogSumExp.apply(logits) - picked).mean()


def check_gradient(seed=0):
    """``tj.autograd.gradcheck`` of LogSumExp at a random float64 point (large values
    included, where a naive exp would overflow)."""
    rng = np.random.default_rng(seed)
    x = tj.tensor(rng.normal(0.0, 3.0, (4, 5)) + np.array([[0.0], [500.0], [-500.0], [0.0]]),
                  requires_grad=True)
    return tj.autograd.gradcheck(LogSumExp.apply, (x,))


def make_blobs(points_per_class=50, seed=0):
    """Three Gaussian blobs in the plane: ``(features float32 (n, 2), labels int64 (n,))``."""
    rng = np.random.default_rng(seed)
    centres = np.array([[0.0, 2.0], [-2.0, -1.0], [2.0, -1.0]])
    features = np.concatenate([rng.normal(c, 0.6, (points_per_class, 2)) for c in centres])
    labels = np.repeat(np.arange(len(centres)), points_per_class)
    return features.astype(np.float32), labels.astype(np.int64)


def train(steps=200, lr=0.1, seed=0):
    """Fit the classifier with SGD; returns the losses, the final accuracy and the model."""
    tj.manual_seed(seed)
    features, labels = make_blobs(seed=seed)
    x, y = tj.from_numpy(features), tj.from_numpy(labels)
    model = SoftmaxRegression(2, 3)
    optimizer = tj.optim.SGD(model.parameters(), lr=lr)
    losses = []
    for _ in range(steps):
        loss = model.loss(x, y)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    with tj.no_grad():
        accuracy = (model(x).argmax(dim=1) == y).float().mean().item()
    return losses, accuracy, model, (x, y)


if __name__ == "__main__":
    print("gradcheck(LogSumExp):", check_gradient())
    big = tj.tensor([[1000.0, 1000.0], [-1000.0, -1000.0]])
    print("LogSumExp of [1000, 1000] and [-1000, -1000]:", LogSumExp.apply(big).tolist(),
          "(log 2 = 0.693 above each)")
    losses, accuracy, model, (x, y) = train()
    print(f"softmax regression: loss {losses[0]:.3f} -> {losses[-1]:.3f}, accuracy {accuracy:.1%}")
    params = {name: p for name, p in model.named_parameters()}
    print("backward graph of the loss (Mermaid):")
    print(tj.viz.to_mermaid(model.loss(x, y), params=params))
