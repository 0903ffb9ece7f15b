"""``python -m tapejit``: the seed example, its tape, and a 10,000-op scalar graph."""
import time

import tapejit as tj
import tapejit.nn.functional as F
from tapejit import demo
from tapejit.summary import tape_table


def seed_example():
    w = tj.tensor(2.0, requires_grad=True)
    x = tj.tensor(3.0)
    b = tj.tensor(1.0, requires_grad=True)
    y_true = tj.tensor(10.0)
    loss = (w * x + b - y_true) ** 2
    print("L = (w*x + b - y_true)**2 with w=2, x=3, b=1, y_true=10")
    print(tape_table(loss))
    loss.backward()
    print(f"L = {loss.item():g}   w.grad = {w.grad.item():g}   b.grad = {b.grad.item():g}   "
          f"x.grad = {x.grad}")


def scalar_graph(n_ops):
    _, out = demo.scalar_graph(tj, F, n_ops)
    out.backward()


def main():
    seed_example()
    print()
    scalar_graph(200)  # compile (or load from cache) the float64 sweeps
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        scalar_graph(10_000)
        best = min(best, time.perf_counter() - t0)
    print(f"10,000-op scalar graph (about 30,000 tensor ops), record + backward: {best * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
