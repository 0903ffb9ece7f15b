"""Adadelta, as torch.optim.Adadelta."""
import numpy as np

from tapejit.optim.optimizer import (CAPTURABLE_DEVICES, Optimizer, check_step_options,
                                     grad_value, with_grads)
from tapejit.tensor import Tensor

__all__ = ["Adadelta"]

# torch's Adadelta does not list 'xla' among the capturable devices
_CAPTURABLE_MESSAGE = ("If capturable=True, params and state_steps must be on supported devices: "
                       + CAPTURABLE_DEVICES.replace(", 'xla'", "") + ".")


class Adadelta(Optimizer):
    """torch.optim.Adadelta's rule (single-tensor path)::

        g = -grad if maximize else grad;  g += weight_decay * p
        s = rho * s + (1 - rho) * g * g
        delta = sqrt(acc + eps) / sqrt(s + eps) * g
        acc = rho * acc + (1 - rho) * delta * delta;  p -= lr * delta

    NumPy operations in torch's order (see Adagrad for why not a compiled kernel).
    ``foreach`` changes nothing; ``capturable=True`` and ``differentiable=True`` fail at the
    step as torch's do on the CPU.
    """

    def __init__(self, params, lr=1.0, rho=0.9, eps=1e-6, weight_decay=0, foreach=None, *,
                 capturable=False, maximize=False, differentiable=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= rho <= 1.0:
            raise ValueError(f"Invalid rho value: {rho}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "rho": rho, "eps": eps, "weight_decay": weight_decay,
                    "maximize": maximize, "capturable": capturable, "foreach": foreach,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        with np.errstate(all="ignore"):
            for group in self.param_groups:
                if group["differentiable"] or group["capturable"]:
                    check_step_options(group, _CAPTURABLE_MESSAGE)
                lr = float(group["lr"])
                rho = group["rho"]
                eps = group["eps"]
                weight_decay = group["weight_decay"]
                maximize = group["maximize"]
                for p, grad in with_grads(group):
                    param_state = self.state[p]
                    if not param_state:
                        param_state["step"] = self._step_counter()
                        param_state["square_avg"] = self._state_zeros(p)
                        param_state["acc_delta"] = self._state_zeros(p)
                    param = self._param_array(p)
                    g = grad_value(grad, param)
                    param_state["step"]._data += 1
                    if maximize:
                        g = -g
                    if weight_decay != 0:
                        g = g + weight_decay * param
                    square_avg = param_state["square_avg"]._data
                    acc_delta = param_state["acc_delta"]._data
                    square_avg *= rho
                    square_avg += (1 - rho) * g * g
                    std = np.sqrt(square_avg + eps)
                    delta = np.sqrt(acc_delta + eps) / std * g
                    acc_delta *= rho
                    acc_delta += (1 - rho) * delta * delta
                    param += -lr * delta
        return loss
