"""Loading cached sweeps without the set-up Numba does for its compiler.

Before a Numba dispatcher loads compiled code from its on-disk cache, Numba "refreshes"
its CPU target, as it does before compiling: it imports some forty modules of its own
(array maths and linear algebra, which import SciPy's, typed containers, random,
polynomials, ...) and installs their typing and lowering registries.  That is about
0.15 s and 30,000 objects in every process, a large part of SPEC section 5's start-up
budget, and the interpreter's collections at exit walk those objects again.

Code read from the cache is already lowered and linked: what it calls at run time are
Numba's C helpers (their symbols are registered when Numba is imported) and its runtime
(NRT, registered on first use).  So tapejit's cached entry points (``_jit.sweep``) use
``SweepCache``, whose load registers the runtime and nothing else.  A cache miss compiles
through Numba's compiler, which refreshes the target itself; a load that fails for any
reason is retried the usual way.

Numba's check that SciPy's BLAS is there (with the integer width its build expects) runs
when Numba imports its array maths, which such a process may never do.  ``ensure_blas``
runs that check before tapejit first loads the sweeps of its ``linalg`` group
(``tape.sweeps``); tapejit's products call Numba's C helper ``numba_xxgemm``
(``ops/_blas.py``), which imports SciPy's BLAS itself at the first product.
"""
from numba.core.caching import FunctionCache
from numba.core.runtime import rtsys

_blas_checked = [False]


class SweepCache(FunctionCache):
    """A dispatcher's on-disk cache whose loads skip the target's refresh (see above)."""

    def load_overload(self, sig, target_context):
        rtsys.initialize(target_context)
        try:
            with self._guard_against_spurious_io_errors():
                return self._load_overload(sig, target_context)
        except Exception:
            # Not expected; the usual load refreshes the target first, which is never wrong.
            return super().load_overload(sig, target_context)


def light_loading(dispatcher):
    """``dispatcher`` (compiled with ``cache=True``) loads from its cache with ``SweepCache``.
    Left as it is if this Numba's cache has another layout."""
    cache = getattr(dispatcher, "_cache", None)
    if type(cache) is FunctionCache and hasattr(cache, "_load_overload"):
        dispatcher._cache = SweepCache(dispatcher.py_func)
    return dispatcher


def ensure_blas():
    """Numba's check that SciPy's BLAS is there, with the integer width Numba expects."""
    if not _blas_checked[0]:
        from numba.np.linalg import ensure_blas
        ensure_blas()
        _blas_checked[0] = True
