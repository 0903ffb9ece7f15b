"""How an op is spelled outside the tape: ``tj.<name>``, ``Tensor.<name>``, in place, NumPy.

Apart from ``tapejit/registry.py`` on purpose: the registry is hashed into every compiled
sweep, and names never reach compiled code, so editing this file recompiles nothing.
"""
from dataclasses import dataclass
from typing import Callable, Optional


@dataclass(frozen=True)
class Names:
    """How an op is spelled outside the tape (not compiled: no part of the registry hash).

    ``functions``: ``tj.<name>`` for each (the first is the op's own name; the others are
    aliases, ``arcsin`` of ``asin``), and ``Tensor.<name>`` too when ``method``.
    ``in_place``: "method" adds ``Tensor.<name>_``; "function" adds torch's function form
    ``tj.<name>_`` as well.  ``special``: ``tj.special.<name>``.  ``numpy``: NumPy ufuncs
    (``np.<name>``) that ``Tensor.__array_ufunc__`` routes to the op's front end.
    ``dunders``: Tensor operators running the front end (``__neg__``).  ``integer``: the
    NumPy function giving an integer tensor's result (torch keeps the dtype; no gradient);
    without it an integer tensor is promoted to the default float dtype, as torch.
    ``written``: the front ends are hand-written in the op's module (their arguments are
    more than one tensor): the names are listed for the stub and the tests, not generated."""
    functions: tuple = ()
    method: bool = True
    in_place: str = ""
    special: tuple = ()
    numpy: tuple = ()
    dunders: tuple = ()
    integer: Optional[Callable] = None
    written: bool = False

    def __post_init__(self):
        if self.in_place not in ("", "method", "function"):
            raise ValueError(f"Names.in_place must be '', 'method' or 'function', got {self.in_place!r}")

    def in_place_names(self):
        return [f"{name}_" for name in self.functions] if self.in_place else []


def names(*functions, method=True, in_place="", special=(), numpy=(), dunders=(), integer=None, written=False):
    """``Names`` in one line: ``names("log1p", in_place="function", special=("log1p",), numpy=("log1p",))``."""
    return Names(tuple(functions), method, in_place, tuple(special), tuple(numpy), tuple(dunders), integer,
                 written)
