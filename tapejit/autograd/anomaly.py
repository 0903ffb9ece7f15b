"""``detect_anomaly``: the backward sweep runs one record at a time and stops at the
first node whose gradient contains NaN, naming it as PyTorch does."""
import warnings

from tapejit.tape import state


class detect_anomaly:
    def __init__(self, check_nan=True):
        self.check_nan = check_nan

    def __enter__(self):
        warnings.warn("Anomaly Detection has been enabled. This mode will increase the runtime and "
                      "should only be enabled for debugging.", UserWarning, stacklevel=2)
        self._prev = state.anomaly
        state.anomaly = self.check_nan

    def __exit__(self, *exc):
        state.anomaly = self._prev
        return False

    def __call__(self, fn):
        def wrapper(*args, **kwargs):
            with detect_anomaly(self.check_nan):
                return fn(*args, **kwargs)
        return wrapper


class set_detect_anomaly:
    def __init__(self, mode, check_nan=True):
        self._prev = state.anomaly
        state.anomaly = bool(mode) and check_nan

    def __enter__(self):
        pass

    def __exit__(self, *exc):
        state.anomaly = self._prev
        return False
