"""``tj.set_num_threads`` / ``tj.get_num_threads``: threads inside one op, as in torch.

Two things use them: BLAS products (Numba's ``np.dot`` calls SciPy's bundled OpenBLAS),
and the chunked runs of large elementwise records (``tapejit/chunked.py``).  On a busy
machine extra threads can make small products many times slower, so scripts that call
``torch.set_num_threads(1)`` must get the same effect here.  The default is what torch
takes: ``OMP_NUM_THREADS`` when set, else the cores this process may use.  BLAS is set
through OpenBLAS's own C entry points; where SciPy ships another BLAS, only the chunked
runs follow the setting.
"""
import ctypes
import glob
import os

_lib = []   # [] not looked up yet; [None] no controllable BLAS; [CDLL] SciPy's OpenBLAS


def _openblas():
    if not _lib:
        import scipy
        root = os.path.dirname(scipy.__file__)
        found = None
        for folder in (os.path.join(os.path.dirname(root), "scipy.libs"), os.path.join(root, ".dylibs")):
            for path in sorted(glob.glob(os.path.join(folder, "libscipy_openblas*"))):
                lib = ctypes.CDLL(path)   # the copy SciPy already loaded: same handle
                if hasattr(lib, "scipy_openblas_set_num_threads"):
                    found = lib
                    break
            if found is not None:
                break
        _lib.append(found)
    return _lib[0]


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


def set_num_threads(n):
    """Use ``n`` threads inside one op: BLAS products (``matmul``, ``nn.Linear``) and the
    chunked runs of large elementwise records."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n!r}")
    from tapejit import chunked
    chunked.THREADS = n
    lib = _openblas()
    if lib is not None:
        lib.scipy_openblas_set_num_threads(ctypes.c_int(n))


def get_num_threads():
    """Threads used inside one op."""
    from tapejit import chunked
    return chunked.THREADS
