"""The worked examples the project started from, with their exact gradients.

Run: python examples/seed_examples.py
"""
import tapejit as tj


def linear_squared_error():
    """L = (w*x + b - y_true)**2 at w=2, x=3, b=1, y_true=10: dL/dw = -18, dL/db = -6."""
    w = tj.tensor(2.0, requires_grad=True)
    x = tj.tensor(3.0)
    b = tj.tensor(1.0, requires_grad=True)
    loss = (w * x + b - tj.tensor(10.0)) ** 2
    loss.backward()
    return w.grad.item(), b.grad.item()


def input_without_grad():
    """(w*x + b - 3)**2 at x=1, w=2, b=0.5: w.grad = -1, b.grad = -1, x.grad stays None."""
    x = tj.tensor(1.0)
    w = tj.tensor(2.0, requires_grad=True)
    b = tj.tensor(0.5, requires_grad=True)
    ((w * x + b - 3) ** 2).backward()
    return w.grad.item(), b.grad.item(), x.grad


def accumulation():
    """y = (x + w) * 2, backward three times: x.grad accumulates 2, 4, 6; zeroed, 2, 2, 2."""
    x = tj.tensor(1.0, requires_grad=True)
    w = tj.tensor(3.0, requires_grad=True)
    y = (x + w) * 2
    accumulated = []
    for _ in range(3):
        y.backward(retain_graph=True)
        accumulated.append(x.grad.item())
    zeroed = []
    for _ in range(3):
        x.grad.zero_()
        y.backward(retain_graph=True)
        zeroed.append(x.grad.item())
    return accumulated, zeroed


if __name__ == "__main__":
    print("w.grad, b.grad =", linear_squared_error())
    print("w.grad, b.grad, x.grad =", input_without_grad())
    print("accumulated, after zero_() =", accumulation())
