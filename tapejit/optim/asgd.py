"""Averaged SGD, as torch.optim.ASGD."""
import numpy as np

from tapejit.creation import tensor as _new_tensor
from tapejit.dtypes import get_default_dtype
from tapejit.optim.optimizer import (CAPTURABLE_DEVICES, Optimizer, check_step_options,
                                     grad_value, scalar_dtype, with_grads)
from tapejit.tensor import Tensor

__all__ = ["ASGD"]

_CAPTURABLE_MESSAGE = ("If capturable=True, params, mus, etas, and state_steps must be on "
                       f"supported devices: {CAPTURABLE_DEVICES}.")


class ASGD(Optimizer):
    """torch.optim.ASGD's rule (single-tensor path), with ``t`` the step count::

        g = -grad if maximize else grad;  g += weight_decay * p
        p *= 1 - lambd * eta;  p -= eta * g
        ax += (p - ax) * mu  (ax = p while mu is 1)
        eta = lr / (1 + lambd * lr * t) ** alpha;  mu = 1 / max(1, t - t0)

    ``eta`` and ``mu`` are scalar tensors of the step's dtype (float32 unless float64 is the
    default dtype), rounded there as torch's are; ``ax`` is the running average of the
    parameter.  NumPy operations in torch's order (see Adagrad for why not a compiled kernel).
    """

    def __init__(self, params, lr=1e-2, lambd=1e-4, alpha=0.75, t0=1e6, weight_decay=0,
                 foreach=None, maximize=False, differentiable=False, capturable=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "lambd": lambd, "alpha": alpha, "t0": t0,
                    "weight_decay": weight_decay, "foreach": foreach, "maximize": maximize,
                    "differentiable": differentiable, "capturable": capturable}
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        with np.errstate(all="ignore"):
            for group in self.param_groups:
                if group["differentiable"] or group["capturable"]:
                    check_step_options(group, _CAPTURABLE_MESSAGE)
                lr = float(group["lr"])
                lambd = group["lambd"]
                alpha = group["alpha"]
                t0 = group["t0"]
                weight_decay = group["weight_decay"]
                maximize = group["maximize"]
                for p, grad in with_grads(group):
                    param_state = self.state[p]
                    if not param_state:
                        param_state["step"] = self._step_counter()
                        param_state["eta"] = _new_tensor(lr, dtype=scalar_dtype())
                        param_state["mu"] = _new_tensor(1.0, dtype=scalar_dtype())
                        param_state["ax"] = self._state_zeros(p)
                    param = self._param_array(p)
                    g = grad_value(grad, param)
                    if maximize:
                        g = -g
                    step_t = param_state["step"]._data
                    step_t += 1
                    if weight_decay != 0:
                        g = g + weight_decay * param
                    eta = param_state["eta"]._data
                    mu = param_state["mu"]._data
                    ax = param_state["ax"]._data
                    eta_value = float(eta)
                    param *= 1 - lambd * eta_value
                    param += -eta_value * g
                    if float(mu) != 1:
                        # torch multiplies by the scalar tensor mu in the parameter's dtype
                        ax += (param - ax) * param.dtype.type(mu)
                    else:
                        ax[...] = param
                    step = float(step_t)
                    # torch.as_tensor(value): rounded to the default dtype, whatever the
                    # dtype of eta and mu (a loaded state may hold them in float64)
                    rounded = get_default_dtype().np.type
                    eta[...] = rounded(lr / ((1 + lambd * lr * step) ** alpha))
                    mu[...] = rounded(1 / max(1, step - t0))
        return loss
