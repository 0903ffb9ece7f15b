"""``tapejit.nn.functional``: activations and losses as functions (PyTorch names)."""
from tapejit.ops.activation import softmax, log_softmax  # noqa: F401
from tapejit.ops.unary import relu as _relu, sigmoid, tanh, softplus, gelu, leaky_relu  # noqa: F401


def relu(input, inplace=False):
    if inplace:
        from tapejit.inplace import apply_inplace
        return apply_inplace(input, lambda: _relu(input), "relu_")
    return _relu(input)
