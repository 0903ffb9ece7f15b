"""PyTorch: Tensors and autograd -- the PyTorch tutorial, run on tapejit.

A third order polynomial, trained to predict y = sin(x) from -pi to pi by minimizing
squared Euclidean distance.  The body of ``train`` is the code of
https://pytorch.org/tutorials/beginner/examples_autograd/polynomial_autograd.html
(pytorch/tutorials, beginner_source/examples_autograd/polynomial_autograd.py) with
``import torch`` replaced by ``import tapejit as torch``.  Lines that are not the
tutorial's are marked "# (not in the tutorial)"; they only wrap the script in a function
so a test can run the same code with real PyTorch and compare the losses.

The tutorial's device selection runs as written: tapejit is CPU-only and says so
(``torch.cuda.is_available()`` is False), so it picks "cpu".

Run: python examples/polynomial_autograd.py
"""
import math

import tapejit as torch


def train(torch, steps=2000, initial_coefficients=None):  # (not in the tutorial)
    """Fit a + b x + c x^2 + d x^3 to sin(x) for ``steps`` steps with library ``torch``;
    returns the loss of every step.  ``initial_coefficients`` = (a, b, c, d) replaces the
    random start, so two libraries can start from the same point."""
    losses = []  # (not in the tutorial)
    dtype = torch.float
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_default_device(device)

    # Create Tensors to hold input and outputs.
    # By default, requires_grad=False, which indicates that we do not need to
    # compute gradients with respect to these Tensors during the backward pass.
    x = torch.linspace(-math.pi, math.pi, 2000, dtype=dtype)
    y = torch.sin(x)

    # Create random Tensors for weights. For a third order polynomial, we need
    # 4 weights: y = a + b x + c x^2 + d x^3
    # Setting requires_grad=True indicates that we want to compute gradients with
    # respect to these Tensors during the backward pass.
    a = torch.randn((), dtype=dtype, requires_grad=True)
    b = torch.randn((), dtype=dtype, requires_grad=True)
    c = torch.randn((), dtype=dtype, requires_grad=True)
    d = torch.randn((), dtype=dtype, requires_grad=True)
    if initial_coefficients is not None:  # (not in the tutorial)
        with torch.no_grad():
            for coefficient, value in zip((a, b, c, d), initial_coefficients):
                coefficient.fill_(value)

    learning_rate = 1e-6
    for t in range(steps):  # the tutorial: range(2000)
        # Forward pass: compute predicted y using operations on Tensors.
        y_pred = a + b * x + c * x ** 2 + d * x ** 3

        # Compute and print loss using operations on Tensors.
        # Now loss is a Tensor of shape (1,)
        # loss.item() gets the scalar value held in the loss.
        loss = (y_pred - y).pow(2).sum()
        if t % 100 == 99:
            print(t, loss.item())
        losses.append(loss.item())  # (not in the tutorial)

        # Use autograd to compute the backward pass. This call will compute the
        # gradient of loss with respect to all Tensors with requires_grad=True.
        # After this call a.grad, b.grad. c.grad and d.grad will be Tensors holding
        # the gradient of the loss with respect to a, b, c, d respectively.
        loss.backward()

        # Manually update weights using gradient descent. Wrap in torch.no_grad()
        # because weights have requires_grad=True, but we don't need to track this
        # in autograd.
        with torch.no_grad():
            a -= learning_rate * a.grad
            b -= learning_rate * b.grad
            c -= learning_rate * c.grad
            d -= learning_rate * d.grad

            # Manually zero the gradients after updating weights
            a.grad = None
            b.grad = None
            c.grad = None
            d.grad = None

    print(f'Result: y = {a.item()} + {b.item()} x + {c.item()} x^2 + {d.item()} x^3')
    return losses  # (not in the tutorial)


if __name__ == "__main__":
    train(torch, 2000)
