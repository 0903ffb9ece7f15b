"""Stochastic gradient descent, optionally with momentum, as torch.optim.SGD."""
from tapejit.optim import _kernels
from tapejit.optim.optimizer import (Optimizer, _grad_array, check_fused, check_step_options,
                                     with_grads)

__all__ = ["SGD"]


class SGD(Optimizer):
    """torch.optim.SGD's rule::

        g = -grad if maximize else grad;  g += weight_decay * p
        buf = g (first step) | momentum * buf + (1 - dampening) * g
        g = g + momentum * buf if nesterov else buf          (when momentum != 0)
        p -= lr * g

    ``foreach`` and ``fused`` are accepted for compatibility and change nothing: every
    update is already one fused compiled pass per parameter.  ``differentiable=True`` is
    accepted and fails at the step as torch's does (see ``check_step_options``).
    """

    def __init__(self, params, lr=1e-3, momentum=0, dampening=0, weight_decay=0, nesterov=False,
                 *, maximize=False, foreach=None, differentiable=False, fused=None):
        if lr < 0.0:
            raise ValueError(f"Invalid learning rate: {lr}")
        if momentum < 0.0:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if weight_decay < 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        defaults = {"lr": lr, "momentum": momentum, "dampening": dampening,
                    "weight_decay": weight_decay, "nesterov": nesterov, "maximize": maximize,
                    "foreach": foreach, "differentiable": differentiable, "fused": fused}
        if nesterov and (momentum <= 0 or dampening != 0):
            raise ValueError("Nesterov momentum requires a momentum and zero dampening")
        super().__init__(params, defaults)
        check_fused(fused, foreach, differentiable)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        flat_of = self._flat
        param_flat = self._param_flat
        for group in self.param_groups:
            if group["differentiable"]:
                check_step_options(group)
            lr = float(group["lr"])
            momentum = float(group["momentum"])
            weight_decay = float(group["weight_decay"])
            sign = -1.0 if group["maximize"] else 1.0
            if momentum == 0.0:
                for p, grad in with_grads(group):
                    flat = param_flat(p)
                    _kernels.sgd_plain(flat, _grad_array(grad, flat), lr, weight_decay, sign)
                continue
            dampening = float(group["dampening"])
            nesterov = bool(group["nesterov"])
            state = self.state
            for p, grad in with_grads(group):
                param_state = state[p]
                buf = param_state.get("momentum_buffer")
                first = buf is None
                if first:
                    buf = param_state["momentum_buffer"] = self._state_zeros(p)
                flat = param_flat(p)
                _kernels.sgd_momentum(flat, _grad_array(grad, flat), flat_of(buf._data), first,
                                      lr, momentum, dampening, weight_decay, nesterov, sign)
        self._finish_step()
        return loss
