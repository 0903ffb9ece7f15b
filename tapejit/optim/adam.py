"""Adam, as torch.optim.Adam (``decoupled_weight_decay=True`` gives AdamW's rule)."""
from tapejit.optim import _kernels
from tapejit.optim.optimizer import (Optimizer, _grad_array, check_fused, check_step_options,
                                     with_grads)
from tapejit.tensor import Tensor

__all__ = ["Adam"]


class Adam(Optimizer):
    """torch.optim.Adam's rule (single-tensor path)::

        g = -grad if maximize else grad
        p *= 1 - lr * weight_decay  (decoupled)   |   g += weight_decay * p  (otherwise)
        m = lerp(m, g, 1 - beta1);  v = beta2 * v + (1 - beta2) * g * g
        v_hat = max(v_max, v) if amsgrad else v
        p -= lr / (1 - beta1**t) * m / (sqrt(v_hat) / sqrt(1 - beta2**t) + eps)

    ``foreach`` and ``fused`` are accepted for compatibility; the update is the same
    compiled pass whatever they say (a fused group keeps its step counters in float32, as
    torch's).  ``capturable=True`` without ``fused`` and ``differentiable=True`` fail at the
    step as torch's do on the CPU (see ``check_step_options``).
    """

    def __init__(self, params, lr=1e-3, betas=(0.9, 0.999), eps=1e-8, weight_decay=0,
                 amsgrad=False, *, foreach=None, maximize=False, capturable=False,
                 differentiable=False, fused=None, decoupled_weight_decay=False):
        if isinstance(lr, Tensor):
            if foreach and not capturable:
                raise ValueError("lr as a Tensor is not supported for capturable=False and "
                                 "foreach=True")
            if lr.numel() != 1:
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
        if not ((isinstance(betas[0], float) and isinstance(betas[1], float))
                or (isinstance(betas[0], Tensor) and isinstance(betas[1], Tensor))):
            raise ValueError("betas must be either both floats or both Tensors")  # noqa: TRY004 (torch's type)
        betas = tuple(float(b) for b in betas)
        defaults = {"lr": lr, "betas": betas, "eps": eps, "weight_decay": weight_decay,
                    "amsgrad": amsgrad, "maximize": maximize, "foreach": foreach,
                    "capturable": capturable, "differentiable": differentiable, "fused": fused,
                    "decoupled_weight_decay": decoupled_weight_decay}
        super().__init__(params, defaults)
        check_fused(fused, foreach, differentiable)

    def _init_state(self, p, param_state, amsgrad, fused):
        param_state["step"] = self._step_counter(fused)
        param_state["exp_avg"] = self._state_zeros(p)
        param_state["exp_avg_sq"] = self._state_zeros(p)
        if amsgrad:
            param_state["max_exp_avg_sq"] = self._state_zeros(p)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        flat_of = self._flat
        param_flat = self._param_flat
        state = self.state
        for group in self.param_groups:
            if group["differentiable"] or group["capturable"]:
                check_step_options(group, differentiable_rule=type(self).__name__)
            lr = float(group["lr"])
            beta1, beta2 = (float(b) for b in group["betas"])
            eps = float(group["eps"])
            weight_decay = float(group["weight_decay"])
            decoupled = bool(group["decoupled_weight_decay"])
            amsgrad = bool(group["amsgrad"])
            sign = -1.0 if group["maximize"] else 1.0
            for p, grad in with_grads(group):
                param_state = state[p]
                if not param_state:
                    self._init_state(p, param_state, amsgrad, bool(group["fused"]))
                flat = param_flat(p)
                if amsgrad:
                    if "max_exp_avg_sq" not in param_state:  # amsgrad switched on later
                        param_state["max_exp_avg_sq"] = self._state_zeros(p)
                    max_exp_avg_sq = flat_of(param_state["max_exp_avg_sq"]._data)
                else:
                    max_exp_avg_sq = flat  # not read by the kernel
                _kernels.adam(flat, _grad_array(grad, flat),
                              flat_of(param_state["exp_avg"]._data),
                              flat_of(param_state["exp_avg_sq"]._data), max_exp_avg_sq,
                              param_state["step"]._data, lr, beta1, beta2, eps, weight_decay,
                              decoupled, amsgrad, sign)
        self._finish_step()
        return loss
