"""``tapejit.autograd``: functional gradients (``functional``: jacobian, hessian, hvp, ...),
custom Functions, anomaly detection, gradcheck and gradgradcheck, ``Variable`` (old
scripts' spelling of a tensor) and ``profiler``."""
from tapejit.engine import backward, grad  # noqa: F401
from tapejit.autograd.anomaly import (detect_anomaly, set_detect_anomaly,  # noqa: F401
                                      is_anomaly_enabled, is_anomaly_check_nan_enabled)
from tapejit.autograd.gradcheck import gradcheck, gradgradcheck  # noqa: F401
from tapejit.autograd import function  # noqa: F401
from tapejit.autograd.function import Function, once_differentiable  # noqa: F401
from tapejit.autograd.variable import Variable  # noqa: F401
from tapejit.autograd import profiler  # noqa: F401
from tapejit.autograd import functional  # noqa: F401
from tapejit.autograd import higher  # noqa: F401  (hands create_graph's recorded backward to the engine)
