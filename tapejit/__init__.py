"""tapejit: a JIT-compiled tape autograd with PyTorch's API, on Numba and NumPy.

``import tapejit as tj`` gives tensors that record every op as a typed record on a flat
tape; ``backward()`` runs one compiled sweep over it.  See README.md for a tour.
"""
from tapejit import dtypes as _dtypes
from tapejit.dtypes import (float32, float64, int64, bool_ as bool, double, float, long,  # noqa: A004
                            int32, int16, int8, uint8, float16, bfloat16, half, short, int,  # noqa: A004
                            get_default_dtype, set_default_dtype)
from tapejit.dtypes import dtype  # noqa: F401
from tapejit.tensor import Tensor, Size
from tapejit import ops as _ops  # noqa: F401  (registers every op and front end)
from tapejit import tensor_math as _tensor_math  # noqa: F401  (front ends built from those ops)
from tapejit import graph as _graph  # noqa: F401  (grad_fn nodes: Tensor.grad_fn)
from tapejit.api import install as _install, front_end as _front_end
from tapejit.creation import (tensor, as_tensor, from_numpy, zeros, ones, empty, full, arange, linspace,
                              eye, manual_seed, rand, randn, randint, randperm, normal, bernoulli)
from tapejit.grad_mode import (no_grad, enable_grad, set_grad_enabled, is_grad_enabled,
                               inference_mode, is_inference_mode_enabled)
from tapejit import autograd, nn, optim  # noqa: F401
from tapejit.functional import grad, value_and_grad, jacobian, hessian, hvp  # noqa: F401
from tapejit import viz  # noqa: F401
from tapejit.threads import set_num_threads, get_num_threads  # noqa: F401
from tapejit.device import device, cuda, accelerator, backends, set_default_device, get_default_device  # noqa: F401,E501
from tapejit.tape import Tape  # noqa: F401
try:
    from tapejit.replay import compile, CompileError  # noqa: F401,A004
except ModuleNotFoundError as missing:   # replay/ plugs in: without it eager mode still works
    if missing.name != "tapejit.replay":
        raise

_install(globals(), Tensor)
from tapejit import _compat  # noqa: E402
_compat.install(globals())
from tapejit import out_args as _out_args  # noqa: E402
_out_args.install(globals())
from math import pi, inf, nan, e  # noqa: E402,F401  (torch.pi, torch.inf, ...: Python floats, as torch)
from tapejit.creation import (FloatTensor, DoubleTensor, LongTensor, BoolTensor, IntTensor,  # noqa: E402,F401
                              ShortTensor, CharTensor, ByteTensor, HalfTensor, BFloat16Tensor)
from tapejit.serialization import save, load  # noqa: E402,F401
from tapejit import utils  # noqa: E402,F401

from tapejit._version import __version__  # noqa: E402,F401


def is_tensor(obj):
    return isinstance(obj, Tensor)


@_front_end
def numel(input):
    return input.numel()


@_front_end
def is_floating_point(input):
    return input.is_floating_point()


from tapejit.dtypes import promote_types  # noqa: E402,F401

del _dtypes
from tapejit import special  # noqa: E402,F401
from tapejit import linalg  # noqa: E402,F401
from tapejit import distributions  # noqa: E402,F401
from tapejit import profiler  # noqa: E402,F401
import sys as _sys  # noqa: E402
autograd.profiler.time_functions_of(_sys.modules[__name__])   # a profile times tj.<op> too
del _sys
