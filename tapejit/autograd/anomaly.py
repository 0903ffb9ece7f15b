"""``detect_anomaly``: the backward sweep runs one record at a time and stops at the
first node whose gradient contains NaN, naming it as PyTorch does.

As in torch the mode is process-wide, not per thread (``torch.is_anomaly_enabled()`` in
another thread sees it), and every form restores the previous mode on the way out, also
when the block raises (the NaN error itself included).  tapejit's anomaly mode checks
for NaN only, so ``check_nan=False`` checks nothing; the flag is kept for
``is_anomaly_check_nan_enabled``."""
import functools
import warnings

from tapejit.tape import modes

_check_nan = [True]


def _set(enabled, check_nan):
    modes.anomaly = bool(enabled) and bool(check_nan)
    _enabled[0] = bool(enabled)
    _check_nan[0] = bool(check_nan)


_enabled = [False]


def is_anomaly_enabled():
    return _enabled[0]


def is_anomaly_check_nan_enabled():
    return _check_nan[0]


class detect_anomaly:
    """Context manager (and, beyond torch, decorator) turning anomaly detection on."""

    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and "
                      "should only be enabled for debugging.", UserWarning, stacklevel=2)
        self._prev = (_enabled[0], _check_nan[0])
        _set(True, self.check_nan)

    def __exit__(self, *exc):
        _set(*self._prev)
        return False

    def __call__(self, fn):
        check_nan = self.check_nan

        @functools.wraps(fn)
        def wrapper(*args, **kwargs):
            with detect_anomaly(check_nan):
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly:
    """Sets the mode at once (a plain call, as torch); as a context manager it puts the
    previous mode back at the end."""

    def __init__(self, mode, check_nan=True):
        self._prev = (_enabled[0], _check_nan[0])
        _set(mode, check_nan)

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        _set(*self._prev)
        return False
