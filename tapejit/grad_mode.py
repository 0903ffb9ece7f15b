"""Grad modes, per thread as in PyTorch: usable as context managers and as decorators."""
import functools

from tapejit.tape import state


class _Mode:
    enabled = True

    def __call__(self, fn):
        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with type(self)(*self._args):
                return fn(*args, **kwargs)
        return wrapper

    def __enter__(self):
        self._prev = state.grad
        state.grad = self.enabled

    def __exit__(self, *exc):
        state.grad = self._prev
        return False

    _args = ()


class _BareDecoratable(_Mode):
    """``@no_grad`` works without parentheses too, as in torch 2.x."""

    def __new__(cls, fn=None):
        self = super().__new__(cls)
        if callable(fn):
            self.__init__()
            return self(fn)
        return self

    def __init__(self, fn=None):
        pass


class no_grad(_BareDecoratable):
    enabled = False


class enable_grad(_BareDecoratable):
    enabled = True


class inference_mode(_Mode):
    def __init__(self, mode=True):
        self.enabled = not mode
        self._mode = bool(mode)
        self._args = (mode,)

    def __enter__(self):
        super().__enter__()
        self._prev_inference = state.inference
        state.inference = self._mode

    def __exit__(self, *exc):
        state.inference = self._prev_inference
        return super().__exit__(*exc)


class set_grad_enabled(_Mode):
    def __init__(self, mode):
        self.enabled = bool(mode)
        self._args = (mode,)
        self._prev = state.grad
        state.grad = self.enabled  # also acts as a plain function call, as in torch

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.grad = self._prev
        return False

    def __call__(self, fn):
        state.grad = self._prev  # as a decorator it must not change the mode where it is applied
        mode = self.enabled

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with set_grad_enabled(mode):
                return fn(*args, **kwargs)
        return wrapper


def is_grad_enabled():
    return state.grad


def is_inference_mode_enabled():
    return state.inference
