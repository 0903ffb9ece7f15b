"""``tj.set_num_threads`` / ``tj.get_num_threads``: threads inside one op, as in torch.

Two things use them: BLAS products (the sweeps call SciPy's BLAS through Numba's C helper),
and the chunked runs of large elementwise records (``tapejit/executor.py``).  On a busy
machine extra threads can make small products many times slower, so scripts that call
``torch.set_num_threads(1)`` must get the same effect here.  The default is what torch
takes: ``OMP_NUM_THREADS`` when set, else the cores this process may use; BLAS keeps its
own default until ``set_num_threads`` is called.

BLAS is set through ``threadpoolctl``, which knows OpenBLAS, MKL and BLIS however they are
shipped: every BLAS library loaded in the process follows the setting (NumPy's too, where
it has its own).  SciPy's BLAS is often loaded only when tapejit first loads its linear
algebra (``_numba_load.ensure_blas``), after a script set its threads: the setting is then
applied to it there (``blas_loaded``).
"""
import os
import sys

# threadpoolctl's controller (its scan of the loaded libraries costs milliseconds, so it is
# kept), the BLAS count set by set_num_threads (None: BLAS's own default), and whether the
# controller was made after SciPy's BLAS was loaded.
_blas = {"controller": None, "threads": None, "complete": False}


def default_threads():
    """``OMP_NUM_THREADS`` if it is a positive integer, else the usable cores (at most 8:
    elementwise runs are limited by memory bandwidth long before that)."""
    try:
        n = int(os.environ.get("OMP_NUM_THREADS", ""))
    except ValueError:
        n = 0
    if n >= 1:
        return n
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return max(1, min(8, cores))


def _blas_libraries(rescan=False):
    """threadpoolctl's controllers of the BLAS libraries loaded in this process."""
    if _blas["controller"] is None or rescan:
        # Imported here: threadpoolctl costs tens of milliseconds of import, which a
        # process that never sets its threads should not pay.
        from threadpoolctl import ThreadpoolController
        _blas["controller"] = ThreadpoolController().select(user_api="blas")
        _blas["complete"] = _scipy_blas_loaded()
    return _blas["controller"].lib_controllers


def _scipy_blas_loaded():
    return "scipy.linalg.cython_blas" in sys.modules


def _limit_blas(n):
    for lib in _blas_libraries(rescan=not _blas["complete"] and _scipy_blas_loaded()):
        lib.set_num_threads(n)


def blas_loaded():
    """SciPy's BLAS is loaded now (``_numba_load.ensure_blas``): give it the count set
    earlier, if any."""
    if _blas["threads"] is not None and not _blas["complete"]:
        _limit_blas(_blas["threads"])


_executor = None   # tapejit.executor, which holds the count its sweeps read (THREADS)


def use_executor(module):
    """``module`` (executor.py, above this one) holds the thread count: set at its import."""
    global _executor
    _executor = module


def set_num_threads(n):
    """Use ``n`` threads inside one op: BLAS products (``matmul``, ``nn.Linear``) and the
    chunked runs of large elementwise records."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n!r}")
    _executor.THREADS = n
    _blas["threads"] = n
    _limit_blas(n)


def get_num_threads():
    """Threads used inside one op."""
    return _executor.THREADS
