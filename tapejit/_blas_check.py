"""Numba's BLAS check, moved from every start-up to the first sweeps that multiply matrices.

When Numba's CPU target loads its array-math module (the first time any compiled
function is loaded), that module checks that SciPy's BLAS can be imported by importing
``scipy.linalg``: about 0.1 s of every process, paid also by programs that never
multiply a matrix (start-up is one of SPEC section 5's targets).  ``defer()`` imports
that module first, with the check stubbed out for the length of the import.  The check
itself, which also refuses a SciPy whose BLAS integer width is not the one Numba was
built for, runs in ``ensure()``, before tapejit first loads the sweeps of its ``linalg``
group (``tape.sweeps``); tapejit's products call Numba's C helper ``numba_xxgemm``
(``ops/_blas.py``), which imports SciPy's BLAS itself at the first product.
"""
import sys

_checked = [False]


def defer():
    """Import ``numba.np.arraymath`` without its import-time BLAS check (see above).  Does
    nothing if Numba loaded it already, or if its layout is not the one expected."""
    if "numba.np.arraymath" in sys.modules:
        return
    try:
        from numba.np import linalg
        real = linalg.ensure_blas
    except (ImportError, AttributeError):
        return
    linalg.ensure_blas = _not_yet
    try:
        import numba.np.arraymath  # noqa: F401
    except Exception:
        pass   # Numba imports it itself later, with its check
    finally:
        linalg.ensure_blas = real


def _not_yet():
    pass


def ensure():
    """Numba's check that SciPy's BLAS is there, with the integer width Numba expects."""
    if not _checked[0]:
        from numba.np.linalg import ensure_blas
        ensure_blas()
        _checked[0] = True
