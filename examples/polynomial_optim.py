"""PyTorch: optim -- the PyTorch tutorial, run on tapejit.

A third order polynomial, trained to predict y = sin(x) from -pi to pi by minimizing
squared Euclidean distance, with ``torch.nn`` modules and ``torch.optim.RMSprop`` doing the
updates.  The body of ``train`` is the code of
https://pytorch.org/tutorials/beginner/examples_nn/polynomial_optim.html
(pytorch/tutorials, beginner_source/examples_nn/polynomial_optim.py) with ``import torch``
replaced by ``import tapejit as torch``.  Lines that are not the tutorial's are marked
"# (not in the tutorial)"; they only wrap the script in a function so a test can run the
same code with real PyTorch and compare the losses.

Run: python examples/polynomial_optim.py
"""
import math

import tapejit as torch


def train(torch, steps=2000, initial_state=None):  # (not in the tutorial)
    """Train the tutorial's ``Linear(3, 1)`` model with RMSprop for ``steps`` steps with
    library ``torch``; returns the loss of every step.  ``initial_state`` (NumPy arrays
    keyed "0.weight", "0.bias") replaces the random initialisation, so two libraries can
    start from the same point."""
    losses = []  # (not in the tutorial)

    # Create Tensors to hold input and outputs.
    x = torch.linspace(-math.pi, math.pi, 2000)
    y = torch.sin(x)

    # Prepare the input tensor (x, x^2, x^3).
    p = torch.tensor([1, 2, 3])
    xx = x.unsqueeze(-1).pow(p)

    # Use the nn package to define our model and loss function.
    model = torch.nn.Sequential(
        torch.nn.Linear(3, 1),
        torch.nn.Flatten(0, 1)
    )
    if initial_state is not None:  # (not in the tutorial)
        model.load_state_dict({name: torch.tensor(value) for name, value in initial_state.items()})
    loss_fn = torch.nn.MSELoss(reduction='sum')

    # Use the optim package to define an Optimizer that will update the weights of
    # the model for us. Here we will use RMSprop; the optim package contains many other
    # optimization algorithms. The first argument to the RMSprop constructor tells the
    # optimizer which Tensors it should update.
    learning_rate = 1e-3
    optimizer = torch.optim.RMSprop(model.parameters(), lr=learning_rate)
    for t in range(steps):  # the tutorial: range(2000)
        # Forward pass: compute predicted y by passing x to the model.
        y_pred = model(xx)

        # Compute and print loss.
        loss = loss_fn(y_pred, y)
        if t % 100 == 99:
            print(t, loss.item())
        losses.append(loss.item())  # (not in the tutorial)

        # Before the backward pass, use the optimizer object to zero all of the
        # gradients for the variables it will update (which are the learnable
        # weights of the model). This is because by default, gradients are
        # accumulated in buffers( i.e, not overwritten) whenever .backward()
        # is called. Checkout docs of torch.autograd.backward for more details.
        optimizer.zero_grad()

        # Backward pass: compute gradient of the loss with respect to model
        # parameters
        loss.backward()

        # Calling the step function on an Optimizer makes an update to its
        # parameters
        optimizer.step()

    linear_layer = model[0]
    print(f'Result: y = {linear_layer.bias.item()} + {linear_layer.weight[:, 0].item()} x + {linear_layer.weight[:, 1].item()} x^2 + {linear_layer.weight[:, 2].item()} x^3')
    return losses  # (not in the tutorial)


if __name__ == "__main__":
    train(torch, 2000)
