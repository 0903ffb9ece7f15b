"""RMSprop, as torch.optim.RMSprop."""
from tapejit.optim import _kernels
from tapejit.optim.optimizer import Optimizer, _grad_array, check_step_options, with_grads
from tapejit.tensor import Tensor

__all__ = ["RMSprop"]


class RMSprop(Optimizer):
    """torch.optim.RMSprop's rule::

        g = -grad if maximize else grad;  g += weight_decay * p
        s = alpha * s + (1 - alpha) * g * g
        avg = sqrt(s - a * a) + eps with a = lerp(a, g, 1 - alpha)  (centered)  |  sqrt(s) + eps
        buf = momentum * buf + g / avg;  p -= lr * buf   (momentum > 0)  |  p -= lr * g / avg

    ``foreach`` changes nothing; ``capturable=True`` and ``differentiable=True`` fail at the
    step as torch's do on the CPU (see ``check_step_options``).
    """

    def __init__(self, params, lr=1e-2, alpha=0.99, eps=1e-8, weight_decay=0, momentum=0,
                 centered=False, capturable=False, foreach=None, maximize=False,
                 differentiable=False):
        if isinstance(lr, Tensor) and lr.numel() != 1:
            raise ValueError("Tensor lr must be 1-element")
        if not 0.0 <= lr:
            raise ValueError(f"Invalid learning rate: {lr}")
        if not 0.0 <= eps:
            raise ValueError(f"Invalid epsilon value: {eps}")
        if not 0.0 <= momentum:
            raise ValueError(f"Invalid momentum value: {momentum}")
        if not 0.0 <= weight_decay:
            raise ValueError(f"Invalid weight_decay value: {weight_decay}")
        if not 0.0 <= alpha:
            raise ValueError(f"Invalid alpha value: {alpha}")
        defaults = {"lr": lr, "momentum": momentum, "alpha": alpha, "eps": eps,
                    "centered": centered, "weight_decay": weight_decay, "capturable": capturable,
                    "foreach": foreach, "maximize": maximize, "differentiable": differentiable}
        super().__init__(params, defaults)

    def step(self, closure=None):
        loss = None if closure is None else self._evaluate(closure)
        flat_of = self._flat
        param_flat = self._param_flat
        state = self.state
        for group in self.param_groups:
            if group["differentiable"] or group["capturable"]:
                check_step_options(group)
            lr = float(group["lr"])
            alpha = float(group["alpha"])
            eps = float(group["eps"])
            weight_decay = float(group["weight_decay"])
            momentum = float(group["momentum"])
            centered = bool(group["centered"])
            sign = -1.0 if group["maximize"] else 1.0
            for p, grad in with_grads(group):
                param_state = state[p]
                if not param_state:
                    param_state["step"] = self._step_counter()
                    param_state["square_avg"] = self._state_zeros(p)
                    if momentum > 0:
                        param_state["momentum_buffer"] = self._state_zeros(p)
                    if centered:
                        param_state["grad_avg"] = self._state_zeros(p)
                flat = param_flat(p)
                # Options switched on after the state was created start from zeros.
                buf = (flat_of(_state_tensor(self, p, param_state, "momentum_buffer")._data)
                       if momentum > 0 else flat)
                grad_avg = (flat_of(_state_tensor(self, p, param_state, "grad_avg")._data)
                            if centered else flat)
                _kernels.rmsprop(flat, _grad_array(grad, flat),
                                 flat_of(param_state["square_avg"]._data), grad_avg, buf,
                                 param_state["step"]._data, lr, alpha, eps, weight_decay,
                                 momentum, centered, sign)
        self._finish_step()
        return loss


def _state_tensor(optimizer, p, param_state, name):
    tensor = param_state.get(name)
    if tensor is None:
        tensor = param_state[name] = optimizer._state_zeros(p)
    return tensor
