"""RAdam, as torch.optim.RAdam."""
import numpy as np

from tapejit.optim.optimizer import (Optimizer, check_step_options, grad_value, lerp_,
                                     with_grads)
from tapejit.tensor import Tensor

__all__ = ["RAdam"]


class RAdam(Optimizer):
    """torch.optim.RAdam's rule (single-tensor path), with ``t`` the step count::

        g = -grad if maximize else grad
        p *= 1 - lr * weight_decay  (decoupled)   |   g += weight_decay * p  (otherwise)
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        rho_inf = 2 / (1 - beta2) - 1;  rho_t = rho_inf - 2 t beta2**t / (1 - beta2**t)
        p -= m / (1 - beta1**t) * lr * sqrt(1 - beta2**t) / (sqrt(v) + eps) * rect  (rho_t > 5)
        p -= m / (1 - beta1**t) * lr                                                 (otherwise)

    with ``rect`` the variance rectification.  torch computes ``c / x`` for a tensor ``x``
    as ``x.reciprocal() * c``; so does this rule.  NumPy operations in torch's order (see
    Adagrad for why not a compiled kernel).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 decoupled_weight_decay=False, *, foreach=None, maximize=False,
                 capturable=False, differentiable=False):
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
                    "maximize": maximize, "foreach": foreach, "capturable": capturable,
                    "decoupled_weight_decay": decoupled_weight_decay,
                    "differentiable": differentiable}
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
                decoupled = group["decoupled_weight_decay"]
                maximize = group["maximize"]
                for p, grad in with_grads(group):
                    param_state = self.state[p]
                    if not param_state:
                        param_state["step"] = self._step_counter()
                        param_state["exp_avg"] = self._state_zeros(p)
                        param_state["exp_avg_sq"] = self._state_zeros(p)
                    param = self._param_array(p)
                    g = grad_value(grad, param)
                    if maximize:
                        g = -g
                    step_t = param_state["step"]._data
                    step_t += 1
                    step = float(step_t)
                    if weight_decay != 0:
                        if decoupled:
                            param *= 1 - lr * weight_decay
                        else:
                            g = g + weight_decay * param
                    exp_avg = param_state["exp_avg"]._data
                    exp_avg_sq = param_state["exp_avg_sq"]._data
                    lerp_(exp_avg, g, 1 - beta1)
                    exp_avg_sq *= beta2
                    exp_avg_sq += (1 - beta2) * g * g
                    bias_correction1 = 1 - beta1 ** step
                    bias_correction2 = 1 - beta2 ** step
                    bias_corrected_exp_avg = exp_avg / bias_correction1
                    rho_inf = 2 / (1 - beta2) - 1
                    rho_t = rho_inf - 2 * step * (beta2 ** step) / bias_correction2
                    if rho_t > 5.0:
                        rect = ((rho_t - 4) * (rho_t - 2) * rho_inf
                                / ((rho_inf - 4) * (rho_inf - 2) * rho_t)) ** 0.5
                        adaptive_lr = (np.reciprocal(np.sqrt(exp_avg_sq) + eps)
                                       * bias_correction2 ** 0.5)
                        param -= bias_corrected_exp_avg * lr * adaptive_lr * rect
                    else:
                        param -= bias_corrected_exp_avg * lr
        return loss
