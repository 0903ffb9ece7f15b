"""``tj.set_num_threads`` / ``tj.get_num_threads``: the BLAS thread pool.

The sweeps run on one thread; the only threaded code behind tapejit's kernels is BLAS
(Numba's ``np.dot`` calls SciPy's bundled OpenBLAS).  On a busy machine a multi-threaded
BLAS can be many times slower on small products than one thread, so scripts that call
``torch.set_num_threads(1)`` must get the same effect here.  The pool is controlled
through OpenBLAS's own C entry points; where SciPy ships another BLAS, these functions
do nothing and report one thread.
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


def set_num_threads(n):
    """Use ``n`` threads in BLAS products (``matmul``, ``nn.Linear``)."""
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise RuntimeError(f"set_num_threads expects a positive integer, got {n!r}")
    lib = _openblas()
    if lib is not None:
        lib.scipy_openblas_set_num_threads(ctypes.c_int(n))


def get_num_threads():
    """Threads BLAS products use."""
    lib = _openblas()
    if lib is None:
        return 1
    lib.scipy_openblas_get_num_threads.restype = ctypes.c_int
    return int(lib.scipy_openblas_get_num_threads())
