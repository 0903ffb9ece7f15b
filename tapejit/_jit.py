"""The one place that owns Numba options.

Every compiled function in tapejit goes through these decorators so that caching,
the error model and bounds checking are decided once.  ``NUMBA_BOUNDSCHECK=1`` in the
environment turns on bounds checks everywhere (Numba reads it itself; a CI lane uses it
to catch slot-index bugs that would otherwise corrupt memory).
"""
from numba import njit
from numba.extending import overload

from tapejit._numba_load import disk_cached

# error_model="numpy": a division by zero gives inf/nan as NumPy and PyTorch do,
# instead of raising inside a sweep where the traceback would be useless.
_COMMON = dict(error_model="numpy", nogil=True)


def rule(fn):
    """A scalar forward value or derivative rule.  Not compiled on its own: the generator
    copies its body into the sweeps (``tapejit/_inline.py``), so importing tapejit builds
    no Numba dispatcher per rule.  ``py_func`` mirrors a dispatcher's, for the generator."""
    fn.py_func = fn
    return fn


def helper(fn):
    """A small compiled function that kernels and sweeps call (accumulation, flags)."""
    return njit(**_COMMON)(fn)


def kernel(fn):
    """A whole-record kernel (matmul, reductions, data movement), compiled with the sweeps.

    Applied twice: in the op module it only marks the function (``py_func``, as on a
    dispatcher); the generated sweep module applies it again to a marked function and gets
    the compiled kernel.  So importing tapejit builds no dispatcher per kernel."""
    if getattr(fn, "py_func", None) is fn:
        if getattr(fn, "inline_always", False):
            return njit(inline="always", **_COMMON)(fn)
        return njit(**_COMMON)(fn)
    fn.py_func = fn
    return fn


def small_kernel(fn):
    """A ``kernel`` run once per record in scalar graphs (copies, stack, small softmax):
    inlined into the sweep at its one call site, where a call costs as much as its work."""
    fn = kernel(fn)
    fn.inline_always = True
    return fn


def overloaded(stub):
    """Compile calls to the plain-Python ``stub`` inside kernels as the implementation the
    decorated function returns for the argument types (Numba's ``overload``).  The stub keeps
    it as ``overload_impl``, so the registry hash sees an edit to it."""
    def register(implementation):
        overload(stub)(implementation)
        stub.overload_impl = implementation
        return implementation
    return register


def sweep(fn):
    """An entry point called from Python: cached on disk so a second process does not compile,
    in tapejit's private cache folder, and loaded without Numba's compiler set-up
    (tapejit/_numba_load.py; not ``cache=True``, which would choose Numba's folders)."""
    return disk_cached(njit(**_COMMON)(fn))


def parallel_sweep(fn):
    """An entry point whose ``prange`` loops run across cores (batched replay)."""
    return disk_cached(njit(parallel=True, **_COMMON)(fn))
