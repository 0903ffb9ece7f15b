"""Adamax, as torch.optim.Adamax."""
import numpy as np

from tapejit.optim.optimizer import (Optimizer, check_step_options, grad_value, lerp_,
                                     with_grads)
from tapejit.tensor import Tensor

__all__ = ["Adamax"]


class Adamax(Optimizer):
    """torch.optim.Adamax's rule (single-tensor path), with ``t`` the step count::

        g = -grad if maximize else grad;  g += weight_decay * p
        m = lerp(m, g, 1 - beta1);  u = max(beta2 * u, |g| + eps)
        p -= lr / (1 - beta1**t) * m / u

    NumPy operations in torch's order (see Adagrad for why not a compiled kernel).
    ``foreach`` changes nothing; ``capturable=True`` and ``differentiable=True`` fail at the
    step as torch's do on the CPU.
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 foreach=None, *, maximize=False, differentiable=False, capturable=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= betas[0] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 0: {betas[0]}")
        if not 0.0 <= betas[1] < 1.0:
            raise ValueError(f"Invalid beta parameter at index 1: {betas[1]}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "foreach": foreach, "maximize": maximize, "differentiable": differentiable,
                    "capturable": capturable}
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        with np.errstate(all="ignore"):
            for group in self.param_groups:
                if group["differentiable"] or group["capturable"]:
                    check_step_options(group)
                lr = float(group["lr"])
                beta1, beta2 = group["betas"]
                eps = group["eps"]
                weight_decay = group["weight_decay"]
                maximize = group["maximize"]
                for p, grad in with_grads(group):
                    param_state = self.state[p]
                    if not param_state:
                        param_state["step"] = self._step_counter()
                        param_state["exp_avg"] = self._state_zeros(p)
                        param_state["exp_inf"] = self._state_zeros(p)
                    param = self._param_array(p)
                    g = grad_value(grad, param)
                    if maximize:
                        g = -g
                    step_t = param_state["step"]._data
                    step_t += 1
                    if weight_decay != 0:
                        g = g + weight_decay * param
                    exp_avg = param_state["exp_avg"]._data
                    exp_inf = param_state["exp_inf"]._data
                    lerp_(exp_avg, g, 1 - beta1)
                    exp_inf *= beta2
                    np.maximum(exp_inf, np.abs(g) + eps, out=exp_inf)
                    clr = lr / (1 - beta1 ** float(step_t))
                    param += -clr * exp_avg / exp_inf
        return loss
