"""``python -m tapejit``: the seed example, its tape, and a 10,000-op scalar graph."""
import time

import tapejit as tj
import tapejit.nn.functional as F
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
    """A. Rogozhnikov's benchmark graph: softplus, 4-term sums, products, 4-way softmax."""
    inputs = [tj.tensor(i / 100, dtype=tj.float64, requires_grad=True) for i in range(100)]
    nodes = list(inputs)
    for k in range(n_ops):
        m = k % 4
        if m == 0:
            nodes.append(F.softplus(nodes[-10]))
        elif m == 1:
            nodes.append(sum(nodes[-30:-10:5]))
        elif m == 2:
            nodes.append(nodes[-20] * nodes[-10])
        else:
            nodes.extend(F.softmax(tj.stack(nodes[-4:]), dim=0))
    nodes[-1].backward()
    return inputs


def main():
    seed_example()
    print()
    scalar_graph(200)  # compile (or load from cache) the float64 sweeps
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        scalar_graph(10_000)
        best = min(best, time.perf_counter() - t0)
    tape = tj.Tape
    del tape
    print(f"10,000-op scalar graph (about 30,000 tensor ops), record + backward: {best * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
