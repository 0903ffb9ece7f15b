"""Learning-rate schedulers with torch.optim.lr_scheduler's API and numbers.

``StepLR``, ``MultiStepLR``, ``ExponentialLR``, ``CosineAnnealingLR`` and ``LinearLR``
update each group's lr from its current value with torch's recursive formulas, operation
for operation, so both libraries give the same floats and compose with outside changes to
``group["lr"]`` the same way.  ``state_dict()`` holds every attribute but the optimizer,
under torch's names.

Left out: the deprecated ``step(epoch)`` (and the closed forms it selects) and torch's
warnings about the order of ``optimizer.step()`` and ``scheduler.step()``.
"""
import math
import types
from collections import Counter

from tapejit.optim.optimizer import Optimizer
from tapejit.tensor import Tensor

__all__ = ["LRScheduler", "_LRScheduler", "StepLR", "MultiStepLR", "ExponentialLR",
           "CosineAnnealingLR", "LambdaLR", "LinearLR", "ReduceLROnPlateau"]


def _group_values(optimizer, key):
    """``group[key]`` of every group; tensors are copied so the list never aliases a group."""
    return [g[key].clone() if isinstance(g[key], Tensor) else g[key]
            for g in optimizer.param_groups]


def _set_lr(group, lr):
    if isinstance(group["lr"], Tensor):  # an optimizer may hold the tensor: keep it
        group["lr"].fill_(float(lr))
    else:
        group["lr"] = lr


def _refuse_epoch(epoch):
    if epoch is not None:
        raise TypeError("step(epoch) is deprecated in torch and not supported by tapejit: "
                        "call step() without the epoch argument")


class LRScheduler:
    """Base class: subclasses define ``get_lr()``, the groups' lrs after ``last_epoch`` += 1."""

    def __init__(self, optimizer, last_epoch=-1):
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.optimizer = optimizer
        if last_epoch == -1:
            for group in optimizer.param_groups:
                lr = group["lr"]
                group.setdefault("initial_lr", lr.clone() if isinstance(lr, Tensor) else lr)
        else:
            for i, group in enumerate(optimizer.param_groups):
                if "initial_lr" not in group:
                    raise KeyError(
                        f"param 'initial_lr' is not specified in param_groups[{i}] when "
                        "resuming scheduler with last_epoch >= 0.\n"
                        "This typically happens when:\n"
                        "1. You're trying to resume training from a checkpoint but haven't "
                        "properly loaded the optimizer state\n"
                        "2. You're using last_epoch >= 0 for a fresh training run "
                        "(not recommended)")
        self.base_lrs = _group_values(optimizer, "initial_lr")
        self.last_epoch = last_epoch
        # torch's constructor takes one step (to epoch 0, or one past a resumed epoch);
        # some rules leave the lr alone during it.
        self._step_count = 0
        self._is_initial = True
        try:
            self.step()
        finally:
            self._is_initial = False

    def get_lr(self):
        raise NotImplementedError

    def get_last_lr(self):
        """The lrs set by the last ``step()``, one per parameter group."""
        return self._last_lr

    def step(self, epoch=None):
        """Advance one epoch (call it after ``optimizer.step()``)."""
        _refuse_epoch(epoch)
        self._step_count += 1
        self.last_epoch += 1
        lrs = self.get_lr()
        if len(lrs) != len(self.optimizer.param_groups):
            raise ValueError(f"get_lr() returned {len(lrs)} values for "
                             f"{len(self.optimizer.param_groups)} parameter groups")
        for group, lr in zip(self.optimizer.param_groups, lrs):
            _set_lr(group, lr)
        self._last_lr = _group_values(self.optimizer, "lr")

    def state_dict(self):
        return {key: value for key, value in self.__dict__.items() if key != "optimizer"}

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)

    def _current_lrs(self):
        return _group_values(self.optimizer, "lr")


class _LRScheduler(LRScheduler):
    """The old name, still subclassed by many scripts."""


class LambdaLR(LRScheduler):
    """lr = initial lr * ``lr_lambda(epoch)``; one function for all groups or one per group."""

    def __init__(self, optimizer, lr_lambda, last_epoch=-1):
        self.optimizer = optimizer
        if isinstance(lr_lambda, (list, tuple)):
            if len(lr_lambda) != len(optimizer.param_groups):
                raise ValueError(f"Expected {len(optimizer.param_groups)} lr_lambdas, but got "
                                 f"{len(lr_lambda)}")
            self.lr_lambdas = list(lr_lambda)
        else:
            self.lr_lambdas = [lr_lambda] * len(optimizer.param_groups)
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        return [base_lr * fn(self.last_epoch)
                for fn, base_lr in zip(self.lr_lambdas, self.base_lrs)]

    def state_dict(self):
        state = {k: v for k, v in self.__dict__.items() if k not in ("optimizer", "lr_lambdas")}
        # As torch: functions cannot be saved, but a callable object's attributes are.
        state["lr_lambdas"] = [None if isinstance(fn, types.FunctionType) else fn.__dict__.copy()
                               for fn in self.lr_lambdas]
        return state

    def load_state_dict(self, state_dict):
        state = dict(state_dict)
        saved_lambdas = state.pop("lr_lambdas")
        self.__dict__.update(state)
        for fn, attributes in zip(self.lr_lambdas, saved_lambdas):
            if attributes is not None:
                fn.__dict__.update(attributes)


class StepLR(LRScheduler):
    """Multiply the lr by ``gamma`` every ``step_size`` epochs."""

    def __init__(self, optimizer, step_size, gamma=0.1, last_epoch=-1):
        self.step_size = step_size
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch == 0 or self.last_epoch % self.step_size != 0:
            return self._current_lrs()
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]


class MultiStepLR(LRScheduler):
    """Multiply the lr by ``gamma`` at each milestone (by ``gamma**n`` if listed n times)."""

    def __init__(self, optimizer, milestones, gamma=0.1, last_epoch=-1):
        self.milestones = Counter(milestones)
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self.last_epoch not in self.milestones:
            return self._current_lrs()
        return [group["lr"] * self.gamma ** self.milestones[self.last_epoch]
                for group in self.optimizer.param_groups]


class ExponentialLR(LRScheduler):
    """Multiply the lr by ``gamma`` every epoch."""

    def __init__(self, optimizer, gamma, last_epoch=-1):
        self.gamma = gamma
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        if self._is_initial:
            return self._current_lrs()
        return [group["lr"] * self.gamma for group in self.optimizer.param_groups]


class CosineAnnealingLR(LRScheduler):
    """Anneal the lr from its initial value to ``eta_min`` over ``T_max`` epochs along a
    half cosine (then back up, periodically), by torch's recursive formula."""

    def __init__(self, optimizer, T_max, eta_min=0.0, last_epoch=-1):
        # torch accepts these and fails later with ZeroDivisionError (or anneals backwards).
        if T_max <= 0:
            raise ValueError(f"Expected positive integer T_max, but got {T_max}")
        self.T_max = T_max
        self.eta_min = eta_min
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        epoch, period, eta_min = self.last_epoch, self.T_max, self.eta_min
        if self._is_initial:
            return self._current_lrs()
        if self._step_count == 1 and epoch > 0:
            return [eta_min + (base_lr - eta_min) * (1 + math.cos(epoch * math.pi / period)) / 2
                    for base_lr in self.base_lrs]
        if (epoch - 1 - period) % (2 * period) == 0:  # leaving the minimum: the ratio is 0/0
            return [group["lr"] + (base_lr - eta_min) * (1 - math.cos(math.pi / period)) / 2
                    for base_lr, group in zip(self.base_lrs, self.optimizer.param_groups)]
        return [(1 + math.cos(math.pi * epoch / period))
                / (1 + math.cos(math.pi * (epoch - 1) / period))
                * (group["lr"] - eta_min) + eta_min
                for group in self.optimizer.param_groups]


class LinearLR(LRScheduler):
    """Scale the lr by a factor going linearly from ``start_factor`` to ``end_factor`` over
    ``total_iters`` epochs, then keep it."""

    def __init__(self, optimizer, start_factor=1.0 / 3, end_factor=1.0, total_iters=5,
                 last_epoch=-1):
        if start_factor > 1.0 or start_factor <= 0:
            raise ValueError("Starting multiplicative factor expected to be greater than 0 and "
                             "less or equal to 1.")
        if end_factor > 1.0 or end_factor < 0:
            raise ValueError("Ending multiplicative factor expected to be between 0 and 1.")
        self.start_factor = start_factor
        self.end_factor = end_factor
        self.total_iters = total_iters
        super().__init__(optimizer, last_epoch)

    def get_lr(self):
        start, end = self.start_factor, self.end_factor
        if self.last_epoch == 0:
            return [group["lr"] * start for group in self.optimizer.param_groups]
        if self._is_initial or self.last_epoch > self.total_iters:
            return self._current_lrs()
        # the ratio of this epoch's factor to the previous one's
        ratio = 1.0 + (end - start) / (self.total_iters * start
                                       + (self.last_epoch - 1) * (end - start))
        return [group["lr"] * ratio for group in self.optimizer.param_groups]


class ReduceLROnPlateau(LRScheduler):
    """Multiply the lr by ``factor`` (down to ``min_lr``) once the metric given to
    ``step(metrics)`` has not improved for more than ``patience`` epochs, then wait
    ``cooldown`` epochs before counting again.  As in torch, it leaves ``initial_lr`` and
    ``base_lrs`` unset."""

    def __init__(self, optimizer, mode="min", factor=0.1, patience=10, threshold=1e-4,
                 threshold_mode="rel", cooldown=0, min_lr=0, eps=1e-8):
        if factor >= 1.0:
            raise ValueError("Factor should be < 1.0.")
        if not isinstance(optimizer, Optimizer):
            raise TypeError(f"{type(optimizer).__name__} is not an Optimizer")
        self.factor = factor
        self.optimizer = optimizer
        groups = len(optimizer.param_groups)
        if isinstance(min_lr, (list, tuple)):
            if len(min_lr) != groups:
                raise ValueError(f"expected {groups} min_lrs, got {len(min_lr)}")
            self.default_min_lr = None
            self.min_lrs = list(min_lr)
        else:
            self.default_min_lr = min_lr
            self.min_lrs = [min_lr] * groups
        self.patience = patience
        self.cooldown = cooldown
        self.eps = eps
        self.last_epoch = 0
        self._last_lr = self._current_lrs()
        self._check_modes(mode, threshold, threshold_mode)
        self.best = self.mode_worse
        self.cooldown_counter = 0
        self.num_bad_epochs = 0

    def _check_modes(self, mode, threshold, threshold_mode):
        if mode not in ("min", "max"):
            raise ValueError("mode " + mode + " is unknown!")
        if threshold_mode not in ("rel", "abs"):
            raise ValueError("threshold mode " + threshold_mode + " is unknown!")
        self.mode_worse = math.inf if mode == "min" else -math.inf
        self.mode = mode
        self.threshold = threshold
        self.threshold_mode = threshold_mode

    @property
    def in_cooldown(self):
        return self.cooldown_counter > 0

    def _is_better(self, current, best):
        if self.mode == "min":
            return current < (best * (1.0 - self.threshold) if self.threshold_mode == "rel"
                              else best - self.threshold)
        return current > (best * (self.threshold + 1.0) if self.threshold_mode == "rel"
                          else best + self.threshold)

    def step(self, metrics, epoch=None):
        _refuse_epoch(epoch)
        current = float(metrics)
        self.last_epoch += 1
        if self._is_better(current, self.best):
            self.best = current
            self.num_bad_epochs = 0
        else:
            self.num_bad_epochs += 1
        if self.in_cooldown:
            self.cooldown_counter -= 1
            self.num_bad_epochs = 0
        if self.num_bad_epochs > self.patience:
            self._reduce_lr()
            self.cooldown_counter = self.cooldown
            self.num_bad_epochs = 0
        self._last_lr = self._current_lrs()

    def _reduce_lr(self):
        groups = len(self.optimizer.param_groups)
        if groups != len(self.min_lrs):
            if self.default_min_lr is None:
                raise RuntimeError(
                    f"The number of param groups in the `optimizer` ({groups}) differs from "
                    f"when `ReduceLROnPlateau` was initialized ({len(self.min_lrs)}), usually "
                    "due to a new param group being added to the optimizer. Please modify the "
                    "`min_lrs` field to match the length of the `optimizer` param groups.")
            self.min_lrs = [self.default_min_lr] * groups
        for group, min_lr in zip(self.optimizer.param_groups, self.min_lrs):
            old_lr = float(group["lr"])
            new_lr = max(old_lr * self.factor, min_lr)
            if old_lr - new_lr > self.eps:
                _set_lr(group, new_lr)

    def load_state_dict(self, state_dict):
        self.__dict__.update(state_dict)
        self._check_modes(self.mode, self.threshold, self.threshold_mode)
