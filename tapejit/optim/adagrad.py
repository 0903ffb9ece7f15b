"""Adagrad, as torch.optim.Adagrad."""
import numpy as np

from tapejit.creation import full as _full
from tapejit.optim.optimizer import (Optimizer, check_fused, check_step_options, grad_value,
                                     with_grads)
from tapejit.tensor import Tensor

__all__ = ["Adagrad"]


class Adagrad(Optimizer):
    """torch.optim.Adagrad's rule (single-tensor path), with ``t`` the step count::

        g = -grad if maximize else grad;  g += weight_decay * p
        clr = lr / (1 + (t - 1) * lr_decay)
        sum += g * g;  p -= clr * g / (sqrt(sum) + eps)

    As in torch, every parameter's state (``step``, ``sum`` filled with
    ``initial_accumulator_value``) exists from construction on.  The update is a few NumPy
    operations in torch's order (no compiled kernel: nothing to compile on first use, and
    already faster per step than torch's own).  ``foreach`` and ``fused`` change nothing.
    """

    def __init__(self, params, lr=1e-2, lr_decay=0, weight_decay=0, initial_accumulator_value=0,
                 eps=1e-10, foreach=None, *, maximize=False, differentiable=False, fused=None):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= lr_decay:
            raise ValueError(f"Invalid lr_decay value: {lr_decay}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= initial_accumulator_value:
            raise ValueError(f"Invalid initial_accumulator_value value: {initial_accumulator_value}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        defaults = {"lr": lr, "lr_decay": lr_decay, "eps": eps, "weight_decay": weight_decay,
                    "initial_accumulator_value": initial_accumulator_value, "foreach": foreach,
                    "maximize": maximize, "differentiable": differentiable, "fused": fused}
        super().__init__(params, defaults)
        check_fused(fused, foreach, differentiable)
        for group in self.param_groups:
            for p in group["params"]:
                self._init_state(p, self.state[p], bool(group["fused"]), initial_accumulator_value)

    def _init_state(self, p, param_state, fused, initial_accumulator_value):
        param_state["step"] = self._step_counter(fused)
        param_state["sum"] = _full(p._shape, initial_accumulator_value, dtype=p._dtype)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        with np.errstate(all="ignore"):   # torch's inf and nan, without NumPy's warnings
            for group in self.param_groups:
                if group["differentiable"]:
                    check_step_options(group)
                lr = float(group["lr"])
                lr_decay = group["lr_decay"]
                weight_decay = group["weight_decay"]
                eps = group["eps"]
                maximize = group["maximize"]
                for p, grad in with_grads(group):
                    param_state = self.state[p]
                    if not param_state:   # a parameter added by add_param_group
                        # torch reads the constructor's value here, not the group's
                        self._init_state(p, param_state, bool(group["fused"]),
                                         self.defaults["initial_accumulator_value"])
                    param = self._param_array(p)
                    g = grad_value(grad, param)
                    step_t = param_state["step"]._data
                    step_t += 1
                    step = float(step_t)
                    if maximize:
                        g = -g
                    if weight_decay != 0:
                        g = g + weight_decay * param
                    clr = lr / (1 + (step - 1) * lr_decay)
                    state_sum = param_state["sum"]._data
                    state_sum += g * g
                    std = np.sqrt(state_sum) + eps
                    param += -clr * g / std
        return loss
