"""NAdam, as torch.optim.NAdam."""
import numpy as np

from tapejit.creation import tensor as _new_tensor
from tapejit.optim.optimizer import (CAPTURABLE_DEVICES, Optimizer, check_step_options,
                                     grad_value, lerp_, scalar_dtype, with_grads)
from tapejit.tensor import Tensor

__all__ = ["NAdam"]

_CAPTURABLE_MESSAGE = ("If capturable=True, params, mu_products and state_steps must be on "
                       f"supported devices: {CAPTURABLE_DEVICES}.")


class NAdam(Optimizer):
    """torch.optim.NAdam's rule (single-tensor path), with ``t`` the step count::

        g = -grad if maximize else grad
        p *= 1 - lr * weight_decay  (decoupled)   |   g += weight_decay * p  (otherwise)
        mu_t = beta1 * (1 - 0.5 * 0.96 ** (t * momentum_decay));  prod *= mu_t
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        denom = sqrt(v / (1 - beta2**t)) + eps
        p -= lr * (1 - mu_t) / (1 - prod) * g / denom
        p -= lr * mu_{t+1} / (1 - prod * mu_{t+1}) * m / denom

    ``mu_product`` is a scalar tensor of the step's dtype (float32 unless float64 is the
    default dtype), rounded there at every step as torch's is.  NumPy operations in torch's
    order (see Adagrad for why not a compiled kernel).
    """

    def __init__(self, params, lr=2e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 momentum_decay=4e-3, decoupled_weight_decay=False, *, foreach=None,
                 maximize=False, capturable=False, differentiable=False):
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
        if not 0.0 <= momentum_decay:
            raise ValueError(f"Invalid momentum_decay value: {momentum_decay}")
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "momentum_decay": momentum_decay,
                    "decoupled_weight_decay": decoupled_weight_decay, "maximize": maximize,
                    "foreach": foreach, "capturable": capturable,
                    "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        with np.errstate(all="ignore"):
            for group in self.param_groups:
                if group["differentiable"] or group["capturable"]:
                    check_step_options(group, _CAPTURABLE_MESSAGE, "NAdam")
                lr = float(group["lr"])
                beta1, beta2 = group["betas"]
                eps = group["eps"]
                weight_decay = group["weight_decay"]
                momentum_decay = group["momentum_decay"]
                decoupled = group["decoupled_weight_decay"]
                maximize = group["maximize"]
                for p, grad in with_grads(group):
                    param_state = self.state[p]
                    if not param_state:
                        param_state["step"] = self._step_counter()
                        param_state["mu_product"] = _new_tensor(1.0, dtype=scalar_dtype())
                        param_state["exp_avg"] = self._state_zeros(p)
                        param_state["exp_avg_sq"] = self._state_zeros(p)
                    param = self._param_array(p)
                    g = grad_value(grad, param)
                    if maximize:
                        g = -g
                    step_t = param_state["step"]._data
                    step_t += 1
                    step = float(step_t)
                    bias_correction2 = 1 - beta2 ** step
                    if weight_decay != 0:
                        if decoupled:
                            param *= 1 - lr * weight_decay
                        else:
                            g = g + weight_decay * param
                    mu = beta1 * (1.0 - 0.5 * (0.96 ** (step * momentum_decay)))
                    mu_next = beta1 * (1.0 - 0.5 * (0.96 ** ((step + 1) * momentum_decay)))
                    mu_product = param_state["mu_product"]._data
                    mu_product *= mu
                    exp_avg = param_state["exp_avg"]._data
                    exp_avg_sq = param_state["exp_avg_sq"]._data
                    lerp_(exp_avg, g, 1 - beta1)
                    exp_avg_sq *= beta2
                    exp_avg_sq += (1 - beta2) * g * g
                    denom = np.sqrt(exp_avg_sq / bias_correction2) + eps
                    mu_product_value = float(mu_product)
                    mu_product_next = mu_product_value * mu_next
                    param += (-lr * (1.0 - mu) / (1.0 - mu_product_value)) * g / denom
                    param += ((-lr * mu_next) / (1.0 - mu_product_next)) * exp_avg / denom
        return loss
