"""The op registry: every differentiable op is defined once, with all its parts.

An op module calls one of the ``define_*`` functions right after writing the op's
compiled rules.  The registry assigns the opcode, and ``tapejit/codegen.py`` derives the
forward and backward sweeps' dispatch from it, so no second list of ops is kept by hand.

Kinds of op, each with the rule shapes the sweep generator knows how to loop over:

``unary``   elementwise ``y = value(x, c0, c1)`` with ``dx = grad(x, y, g, c0, c1)``; ``c0``,
            ``c1`` are static float parameters (a Python scalar operand, softplus's beta).
``binary``  elementwise ``z = value(x, y)`` with ``dx = grad_x(x, y, z, g)``,
            ``dy = grad_y(x, y, z, g)``; a size-1 operand broadcasts with stride 0.
``kernel``  a whole-record forward ``(v, out, a, b, p, q, ints, floats)`` and backward
            ``(v, g, flags, out, a, b, ma, mb, p, q, ints, floats)`` kernel pair.
``load``    brings a leaf, a constant or another tape's tensor into the arena (no kernel).

Each ``define_*`` also takes the op's ``names`` (``Names``): its ``tj.`` function, Tensor
method, in-place variant, ``tj.special`` and NumPy names.  The front ends of an op whose
names say so are generated from them (``tapejit/ops/_front_ends.py``), and the NumPy
dispatch table, the type stub and the tests' name lists are read from them.  Names never
reach compiled code, so they are no part of ``registry_hash()``, and ``Names`` lives in
``tapejit/op_names.py``, outside the hashed generator files: renaming recompiles nothing.
"""
import hashlib
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional

import numpy as np
from numba.core.types import Type as NumbaType

from tapejit.op_names import Names, names  # noqa: F401  (ops modules import them from here)


@dataclass
class Op:
    name: str
    node: str                      # PyTorch's grad_fn name, e.g. "MulBackward0"
    kind: str                      # "unary" | "binary" | "kernel" | "load" | "cast"
    saves: bool = True             # backward reads saved values (freed-graph / in-place errors)
    saved: str = "ab"              # which: operand a, operand b, o = the output; A, B: the
    #                                operand is saved only when the other one needs a gradient
    value: Optional[Callable] = None
    grad: Optional[Callable] = None
    grad_x: Optional[Callable] = None
    grad_y: Optional[Callable] = None
    forward: Optional[Callable] = None
    backward: Optional[Callable] = None
    nconst: int = 0
    operands: int = 2              # tensor operands in fields a, b (kernels with one use b freely)
    # The generated module holding the op's sweeps (``sweep_<group>.py``); each op's
    # sweeps are compiled on their own, when a program first uses the op.
    group: str = ""
    # Test data: ``samples(rng)`` returns a list of ``(label, fn, [numpy inputs])`` cases that
    # exercise the op through the public API; the gradient tests run every case.
    samples: Optional[Callable] = None
    # The value rule is straight-line arithmetic, so applied to NumPy arrays it computes the
    # op elementwise: work that needs no gradient then runs in NumPy, not on the tape.
    vectorized: bool = False
    # For kernels that take more tensor operands than fields a and b can hold (cat, stack,
    # linear's bias): ``listed(ints, p)`` gives the extra operands' encoded offsets, so
    # that a replay's dead-code pass and gradient reachability see every input.
    listed: Optional[Callable] = None
    # What a chunked run (tapejit/executor.py) may hold of a kernel op: "copy" a contiguous
    # range of the source (slices, reshapes), "sum" a full sum that joins the run it sums,
    # in blocks of ``block`` elements (the kernel's own summation order); "" nothing.
    runs: str = ""
    block: int = 0
    names: Optional[Names] = None  # front-end names: not compiled, not hashed
    opcode: int = -1
    module: str = ""


OPS: list = []
BY_NAME: dict = {}


# "sum" (sum and mean: every loss) is apart from "reduce" (max, prod, norm, logsumexp, ...)
# so that a typical program's first gradient does not compile the rarer reductions.
GROUPS = ("arith", "math", "activation", "copy", "index", "reduce", "linalg", "sum", "special", "elementary", "conv",
          "norm", "rnn", "decomp")
_MODULE_GROUP = {"binary": "arith", "core": "arith", "movement": "index", "reduce": "reduce",
                 "linalg": "linalg", "softmax": "activation", "loss": "activation", "unary": "math", "special": "special",
                 "conv": "conv", "pool": "conv", "norm": "norm", "rnn": "rnn"}


def _register(op):
    if op.name in BY_NAME:
        raise ValueError(f"op {op.name!r} is defined twice")
    if not op.group:
        op.group = _MODULE_GROUP.get(op.module.rsplit(".", 1)[-1], "math")
    if op.group not in GROUPS:
        raise ValueError(f"op {op.name!r}: unknown group {op.group!r}")
    op.opcode = len(OPS)
    OPS.append(op)
    BY_NAME[op.name] = op
    return op


def define_unary(name, node, value, grad, nconst=0, saves=True, samples=None, group="", saved="a",
                 operands=1, vectorized=False, names=None):
    """``operands=2`` for ops with a Python-scalar operand, which PyTorch shows as (None, 0)."""
    return _register(Op(name, node, "unary", saves=saves, value=value, grad=grad,
                        nconst=nconst, samples=samples, module=value.py_func.__module__,
                        operands=operands, group=group, saved=saved, vectorized=vectorized, names=names))


def define_binary(name, node, value, grad_x, grad_y, saves=True, samples=None, group="",
                  vectorized=False, saved="ab", names=None):
    return _register(Op(name, node, "binary", saves=saves, value=value, grad_x=grad_x,
                        grad_y=grad_y, samples=samples, module=value.py_func.__module__, group=group,
                        vectorized=vectorized, saved=saved, names=names))


def define_kernel(name, node, forward, backward, saves=True, samples=None, operands=2, group="",
                  saved="ab", listed=None, runs="", block=0, names=None):
    if runs not in ("", "copy", "sum"):
        raise ValueError(f"op {name!r}: runs must be '', 'copy' or 'sum', got {runs!r}")
    return _register(Op(name, node, "kernel", saves=saves, forward=forward, backward=backward,
                        samples=samples, module=forward.py_func.__module__, operands=operands,
                        group=group, saved=saved, listed=listed, runs=runs, block=block, names=names))


def define_special(name, node, kind, saves=False, samples=None, names=None):
    return _register(Op(name, node, kind, saves=saves, samples=samples, module="tapejit.ops.core", names=names))


def same_kernels(name, node, like, saves=None, samples=None, saved=None, names=None):
    """A second op name (its own grad_fn name) running another op's kernels."""
    op = Op(name, node, like.kind, saves=like.saves if saves is None else saves,
            value=like.value, grad=like.grad, grad_x=like.grad_x, grad_y=like.grad_y,
            forward=like.forward, backward=like.backward, nconst=like.nconst,
            samples=samples, module=like.module, operands=like.operands, group=like.group,
            saved=like.saved if saved is None else saved, vectorized=like.vectorized, listed=like.listed,
            runs=like.runs, block=like.block, names=names)
    return _register(op)


def elementwise_kind(op):
    """"unary", "binary" or "copy" (a contiguous range of the source: slices, reshapes):
    the ops whose records a chunked run may hold (``tapejit/executor.py``); else None."""
    if op.kind in ("unary", "binary"):
        return op.kind
    return "copy" if op.runs == "copy" else None


def in_chunked_runs(op):
    """Whether a chunked run's backward sweep (``backward_elementwise``) may meet a record of
    ``op``: the elementwise ops, and the sums (a full sum joins the run it sums)."""
    return elementwise_kind(op) is not None or op.runs == "sum"


# The generator's own files: any edit to them can change every sweep.
GENERATOR_FILES = ("codegen.py", "_inline.py", "_jit.py", "registry.py")
_COMPILED_PARTS = ("value", "grad", "grad_x", "grad_y", "forward", "backward")
# Fields that never reach compiled code: how the op is spelled (front ends, NumPy names).
_NOT_COMPILED = ("names",)


def generator_files():
    here = Path(__file__).parent
    return [here / name for name in GENERATOR_FILES]


def _feed_constant(h, value):
    """Feed a value a compiled function may read as a global or closure constant; anything
    else by its type's name only (its repr could hold an address, unstable across runs)."""
    if value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        h.update(repr(value).encode())
    elif isinstance(value, (tuple, list, frozenset)):
        h.update(b"(")
        for item in value:
            _feed_constant(h, item)
        h.update(b")")
    elif isinstance(value, np.ndarray):
        h.update(f"{value.dtype}{value.shape}".encode())
        h.update(np.ascontiguousarray(value).tobytes())
    elif isinstance(value, (np.generic, NumbaType)):   # a Numba type's repr is its signature
        h.update(repr(value).encode())
    else:
        h.update(f"<{type(value).__module__}.{type(value).__qualname__}>".encode())


def _compiled_function(value):
    """The Python function behind what Numba compiles into the sweeps: a rule or kernel
    (marked with ``py_func``), a helper dispatcher, or an overloaded stub (``overload_impl``)."""
    fn = getattr(value, "py_func", None)
    if fn is not None:
        return fn
    if getattr(value, "overload_impl", None) is not None:
        return value
    return None


def _feed_code(h, code, fn, seen):
    h.update(code.co_code)
    h.update(repr((code.co_names, code.co_varnames, code.co_freevars, code.co_cellvars)).encode())
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            _feed_code(h, const, fn, seen)
        else:
            _feed_constant(h, const)
    # Globals it reads: compiled callees (followed) and constants (Numba freezes them).
    # Names of attributes (``np.exp``) land here too; they are harmless extra reads.
    for name in code.co_names:
        if name in fn.__globals__:
            value = fn.__globals__[name]
            callee = _compiled_function(value)
            if callee is not None:
                _feed_function(h, callee, seen)
            elif not callable(value) and not isinstance(value, types.ModuleType):
                h.update(name.encode())
                _feed_constant(h, value)


def _feed_function(h, fn, seen):
    if fn in seen:
        h.update(fn.__qualname__.encode())
        return
    seen.add(fn)
    h.update(f"{fn.__module__}.{fn.__qualname__}".encode())
    _feed_code(h, fn.__code__, fn, seen)
    _feed_constant(h, fn.__defaults__)
    for cell in fn.__closure__ or ():
        try:
            content = cell.cell_contents
        except ValueError:     # an empty cell
            continue
        callee = _compiled_function(content)
        if callee is not None:
            _feed_function(h, callee, seen)
        else:
            _feed_constant(h, content)
    h.update(b"inline" if getattr(fn, "inline_always", False) else b"call")
    impl = getattr(fn, "overload_impl", None)
    if impl is not None:
        _feed_function(h, impl, seen)


def registry_hash():
    """Hash of what the sweeps are generated from: the generator's files, every op's table
    entry, and the code of every compiled rule and kernel with what it calls and the
    constants it reads.  Python that never runs inside a sweep (front ends, the ops' names,
    samples, derivative formulas, comments) is not part of it, so editing it recompiles nothing.
    A few milliseconds, once per process when the first sweep loads."""
    h = hashlib.sha256()
    for f in generator_files():
        h.update(f.name.encode())
        h.update(f.read_bytes())
    seen = set()
    for op in OPS:
        for field, value in vars(op).items():
            if field in _NOT_COMPILED:
                continue
            if field in _COMPILED_PARTS:
                fn = _compiled_function(value) if value is not None else None
                if fn is not None:
                    _feed_function(h, fn, seen)
            elif not callable(value):
                h.update(field.encode())
                _feed_constant(h, value)
    return h.hexdigest()[:16]
