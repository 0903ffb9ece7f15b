"""Recording: turning an op call into one record on the thread's tape.

These functions are the hot path of eager mode.  They resolve operands to arena
offsets (loading leaves and constants on first use), apply PyTorch's type promotion
and broadcasting, append the six record fields, and return the lazily-valued result.
Ops on integer or bool tensors never need gradients; they are computed at once with
NumPy and give concrete tensors.
"""
import weakref

import numpy as np

from tapejit import dtypes, registry
from tapejit.creation import _shared, _to_array
from tapejit.shapes import numel as _numel
from tapejit.tape import state, current, pack_record
from tapejit.tensor import Tensor, _taped, _concrete, provide as _provide_to_tensor

_OPS = registry.BY_NAME   # cast and expand: ops defined in ops/, above this module


class _Above:
    """What recording calls in ops/ (above it), handed over at import with ``provide``."""
    __slots__ = ("strided_view",)


above = _Above()


def provide(**functions):
    for name, function in functions.items():
        setattr(above, name, function)

# Whether a dtype is taped (float32, float64); the rest take the slow branches below.
_is_float = {d: d.arena >= 0 for d in dtypes.ALL_DTYPES}
_FLOAT32 = dtypes.float32


def wide(t):
    """Narrow float tensor ``t`` (float16, bfloat16) as the float32 tensor it computes in;
    any other tensor as it is."""
    if t._dtype.narrow:
        return _concrete(t._value().astype(np.float32))
    return t


def _wide_as(t, dt):
    """Operand ``t`` of an op whose result is narrow ``dt``, as torch casts it: to ``dt``
    (a 0-d float32 or an int64 tensor is rounded), then computed in float32."""
    if t._dtype is dt:
        return wide(t)
    if t._rg and state.grad:
        raise RuntimeError(_narrow_grad_message(dt))
    return _concrete(dtypes.narrow_values(t._value(), dt).astype(np.float32))


def _narrow_grad_message(dt):
    return (f"tapejit: an op mixing {dt} with a tensor that requires grad would give a {dt} result with "
            f"gradients, which tapejit does not support; compute in float32 (.float()) instead")


def narrowed(t, dt):
    """``t``, computed in float32 from narrow float inputs, rounded to narrow ``dt`` (or
    ``t`` itself if it is not floating point: a comparison's bools, an argmax's indices).
    tapejit has no gradients through narrow floats: a result needing one raises."""
    if not t._dtype.is_floating_point:
        return t
    if t._rg:
        raise RuntimeError(_narrow_grad_message(dt))
    return _concrete(dtypes.narrow_values(t._value(), dt))


def as_tensor_operand(x, like=None):
    """A Python scalar, list or NumPy array used as an operand becomes a constant tensor."""
    if isinstance(x, Tensor):
        return x
    if state.trace is not None and isinstance(x, np.ndarray) and x.dtype in (np.float64, np.float32):
        # tj.compile: the caller's array is read live by every replay, not copied once
        return _shared(np.ascontiguousarray(x))
    arr = _to_array(x, None)
    if like is not None and arr.dtype == np.float64 and not isinstance(x, np.ndarray):
        arr = arr.astype(like._dtype.np if like._dtype.is_floating_point else dtypes.get_default_dtype().np)
    return _concrete(arr)


def operand(tape, t, dt):
    """Arena offset of ``t`` as float dtype ``dt`` on ``tape``."""
    if t._dtype is dt:
        if t._tape is tape:
            return t._off
        return tape.load(t, dt)
    if t._dtype.is_floating_point and (t._rg or t._tape is not None):
        c = cast(t, dt)
        return c._off if c._tape is tape else tape.load(c, dt)
    return tape.load(t, dt)


def result_dtype(x, y):
    """torch.result_type for two tensors: 0-d tensors do not promote within a category."""
    dx, dy = x._dtype, y._dtype
    if dx is dy:
        return dx
    cx, cy = dtypes.category(dx), dtypes.category(dy)
    if cx != cy:   # a higher category wins, whatever the shapes (bool < integer < float)
        return dx if cx > cy else dy
    xs, ys = len(x._shape) == 0, len(y._shape) == 0
    if xs != ys:
        return dy if xs else dx
    return dtypes.promote(dx, dy)


def broadcast_shapes(op, xs, ys):
    n = max(len(xs), len(ys))
    a = (1,) * (n - len(xs)) + tuple(xs)
    b = (1,) * (n - len(ys)) + tuple(ys)
    out = []
    for i, (p, q) in enumerate(zip(a, b)):
        if p == q or q == 1:
            out.append(p)
        elif p == 1:
            out.append(q)
        else:
            raise RuntimeError(
                f"{op}: the size of tensor a ({p}) must match the size of tensor b ({q}) at "
                f"non-singleton dimension {i} (shapes {list(xs)} and {list(ys)})")
    return tuple(out)


# ---- elementwise -------------------------------------------------------------------------

def eager(fn, *args):
    """Compute an op that needs no gradient: record it, run the compiled forward, copy the
    value out and drop the records again.  So the tape only ever holds differentiable
    work, and loops under ``no_grad`` or on constants do not grow it."""
    tape = state.tape or current()
    n0 = tape.n
    cur0 = list(tape.cursor)
    ints0 = tape.nints + len(tape.pints)
    floats0 = tape.nfloats + len(tape.pfloats)
    sources0 = len(tape.sources)
    state.eager = True
    try:
        t = fn(*args)
    finally:
        state.eager = bool(state.trace)   # a trace records everything (see tapejit/replay)
    if t._tape is not tape:
        if tape.n == n0 or not t._dtype.narrow:
            return t
        value = None   # a narrow float result, already read from the records and rounded: drop them
    else:
        tape.flush()
        value = tape.value(t).copy()
    for src in tape.sources[sources0:]:
        for d in (0, 1):
            loads = tape.loads_of.get((id(src), d))
            if loads and loads[-1][2] is src and loads[-1][0] >= cur0[d]:
                loads.pop()
    del tape.sources[sources0:]
    tape.n = tape.nrec = n0
    tape.cursor[0], tape.cursor[1] = cur0
    tape.nints = ints0
    tape.nfloats = floats0
    tape._producers = None
    return t if value is None else _concrete(value)


def _value_as(t, dt):
    v = t._value()
    return v if v.dtype == dt.np else v.astype(dt.np)


def _array(t, dt):
    return t._data if t._dtype is dt else t._data.astype(dt.np)


def _in_numpy(dt, value, *args):
    """A ``vectorized`` op's value rule applied to arrays: small no-grad updates such as
    ``p -= lr * p.grad`` cost a NumPy call instead of a record, a compiled forward and a
    copy.  Division by zero and overflow give inf/nan silently, as in the sweeps."""
    with np.errstate(all="ignore"):
        out = value(*args)
    return _concrete(np.asarray(out, dtype=dt.np))


def on_tape(*inputs):
    """Whether an op on ``inputs`` must be recorded (some input needs a gradient), as
    opposed to computed now by ``eager``.  Front ends that add ``ints``/``floats`` before
    recording ask this first, so ``eager`` drops those too."""
    return state.eager or (state.grad and any(t._rg for t in inputs))


# Scalar ops whose Python number torch first rounds to a narrow float tensor's dtype
# (``x + 1.3`` adds float16(1.3)); mul and div keep the number as it is.
_NARROW_SCALAR_OPERAND = frozenset(("add_scalar", "sub_scalar", "rsub_scalar", "pow_scalar", "rpow_scalar",
                                    "fmod_scalar", "remainder_scalar"))


def record_unary(op, x, c0=0.0, c1=0.0):
    dt = x._dtype
    if not _is_float[dt]:
        if dt.narrow:
            if op.name in _NARROW_SCALAR_OPERAND:
                c0 = float(dtypes.narrow_values(np.float64(c0), dt))
            return narrowed(record_unary(op, wide(x), c0, c1), dt)
        dt = dtypes.get_default_dtype()
    rg = x._rg and state.grad
    if not rg and not state.eager:
        if op.vectorized and x._tape is None:
            return _in_numpy(dt, op.value, _array(x, dt), c0, c1)
        return eager(record_unary, op, x, c0, c1)
    tape = state.tape or current()
    xo = x._off if (x._tape is tape and x._dtype is dt) else operand(tape, x, dt)
    n = x._numel
    d = dt.arena
    cur = tape.cursor
    off = cur[d]
    cur[d] = off + (n or 1)
    if op.nconst:
        q = tape.nfloats + len(tape.pfloats)
        tape.pfloats += (c0, c1)
    else:
        q = 0
    # Tape.append, inlined: this runs once per recorded op.
    r = tape.n
    if r == tape.cap:
        tape.grow()
    pack_record(tape.packed, r * 48, op.opcode * 2 + d, off, xo if rg else ~xo, -1, n, q)
    tape.n = r + 1
    return _taped(tape, off, x._shape, n, dt, rg)


def record_binary(op, x, y, numpy_fallback=None):
    """``op`` on two tensors with broadcasting; ints/bools go to ``numpy_fallback``."""
    dt = x._dtype
    if dt is not y._dtype or not _is_float[dt]:
        dt = result_dtype(x, y)
        if not dt.is_floating_point:
            if numpy_fallback is None:
                raise TypeError(f"{op.name}: not supported for {dt} tensors")
            # In the result dtype, as torch: NumPy would widen int8 by a 0-d int64 tensor.
            return _concrete(np.asarray(numpy_fallback(_value_as(x, dt), _value_as(y, dt))))
        if dt.narrow:
            return narrowed(record_binary(op, _wide_as(x, dt), _wide_as(y, dt), numpy_fallback), dt)
    rg = (x._rg or y._rg) and state.grad
    if not rg and not state.eager:
        if op.vectorized and x._tape is None and y._tape is None:
            if x._shape != y._shape:
                broadcast_shapes(op.name, x._shape, y._shape)   # torch's error text, not NumPy's
            return _in_numpy(dt, op.value, _array(x, dt), _array(y, dt))
        return eager(record_binary, op, x, y, numpy_fallback)
    tape = state.tape or current()
    xs = x._shape
    ys = y._shape
    if xs == ys:
        shape = xs
        q = 0
    elif y._numel == 1 and len(ys) <= len(xs):
        shape = xs
        q = 2
    elif x._numel == 1 and len(xs) <= len(ys):
        shape = ys
        q = 1
    else:
        shape = broadcast_shapes(op.name, xs, ys)
        q = 0
        if xs != shape:
            x = expand(x, shape)
        if ys != shape:
            y = expand(y, shape)
    n = x._numel if q != 1 else y._numel
    xo = x._off if (x._tape is tape and x._dtype is dt) else operand(tape, x, dt)
    yo = y._off if (y._tape is tape and y._dtype is dt) else operand(tape, y, dt)
    d = dt.arena
    cur = tape.cursor
    off = cur[d]
    cur[d] = off + (n or 1)
    # Tape.append, inlined: this runs once per recorded op.
    r = tape.n
    if r == tape.cap:
        tape.grow()
    pack_record(tape.packed, r * 48, op.opcode * 2 + d, off, xo if (rg and x._rg) else ~xo,
                yo if (rg and y._rg) else ~yo, n, q)
    tape.n = r + 1
    return _taped(tape, off, shape, n, dt, rg)


def record(op, inputs, shape, dt, p=0, q=0, grads=None, listed_rg=False):
    """A kernel record with up to two tensor operands (``inputs``) of float dtype ``dt``.

    ``grads`` overrides which operands can receive gradient (default: those requiring it);
    ``listed_rg`` says an operand listed in ``ints`` (cat, stack) requires grad.
    """
    if dt.arena < 0:   # a narrow float: computed in float32 (no kernel runs in another arena)
        if not dt.narrow:
            raise TypeError(f"{op.name}: not supported for {dt} tensors")
        return narrowed(record(op, [wide(t) for t in inputs], shape, _FLOAT32, p, q, grads, listed_rg), dt)
    enabled = state.grad
    wanted = [enabled and t._rg and (grads is None or grads[i]) for i, t in enumerate(inputs)]
    rg = True in wanted
    if not (rg or listed_rg or state.eager):
        return eager(record, op, inputs, shape, dt, p, q, grads)
    tape = state.tape or current()
    fields = [-1, -1]
    for i, t in enumerate(inputs):
        off = t._off if (t._tape is tape and t._dtype is dt) else operand(tape, t, dt)
        fields[i] = off if wanted[i] else ~off
    n = _numel(shape)
    d = dt.arena
    cur = tape.cursor
    off = cur[d]
    cur[d] = off + (n or 1)
    tape.append(op.opcode * 2 + d, off, fields[0], fields[1], p, q)
    return _taped(tape, off, tuple(shape), n, dt, rg or listed_rg)


def encode_operand(tape, t, dt):
    """Operand field for operands listed in ``ints`` (cat/stack)."""
    off = t._off if (t._tape is tape and t._dtype is dt) else operand(tape, t, dt)
    return off if (state.grad and t._rg) else ~off


def float_input(x):
    """Ops that only make sense on floats (exp, softmax, ...) promote ints as torch does
    (narrow floats stay: ``record`` computes them in float32 and rounds)."""
    if _is_float[x._dtype] or x._dtype.narrow:
        return x
    return _concrete(x._value().astype(dtypes.get_default_dtype().np))


# ---- dtype casts and broadcasting -------------------------------------------------------

def cast(x, dt):
    """``x.to(dt)``: a record when the value is differentiable or lazy, NumPy otherwise."""
    if x._dtype is dt:
        return x
    if dt.narrow or x._dtype.narrow:   # no tape: gradients through narrow floats are refused
        if x._rg and state.grad:
            raise RuntimeError(f"tapejit: casting a tensor that requires grad to or from {dt if dt.narrow else x._dtype} "
                               f"is not differentiable in tapejit (no gradients through narrow floats); "
                               f"detach() it first")
        if dt.narrow:
            return _concrete(dtypes.narrow_values(x._value(), dt))
        with np.errstate(invalid="ignore"):
            return _concrete(x._value().astype(dt.np))
    if not dt.is_floating_point or not x._dtype.is_floating_point:
        # NaN and infinities to int64 are INT64_MIN, as torch's C cast, silently as there
        with np.errstate(invalid="ignore"):
            return _concrete(x._value().astype(dt.np))
    rg = x._rg and state.grad
    if not rg and not (state.eager and (x._tape is not None or state.trace is not None)):
        if dt is dtypes.float32 and x._dtype is dtypes.float64:
            with np.errstate(over="ignore"):   # past float32's range is inf, silently as torch
                return _concrete(x._value().astype(dt.np))
        return _concrete(x._value().astype(dt.np))
    tape = state.tape or current()
    src = operand(tape, x, x._dtype)
    n = x._numel
    off = tape.alloc(dt.arena, n)
    op = _OPS["cast"]
    tape.append(op.opcode * 2 + dt.arena, off, src if rg else ~src, -1, n, 0)
    return _taped(tape, off, x._shape, n, dt, rg)


def contiguous_strides(shape):
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= s
    return tuple(reversed(strides))


def expand(x, shape):
    """Broadcast ``x`` to ``shape`` (the gradient sums back over broadcast dims)."""
    shape = tuple(shape)
    xs = x._shape
    if len(shape) < len(xs):
        raise RuntimeError(
            f"expand: the number of sizes provided ({len(shape)}) must be greater or equal to the "
            f"number of dimensions in the tensor ({len(xs)})")
    lead = len(shape) - len(xs)
    src_strides = contiguous_strides(xs)
    strides = []
    sizes = []
    for i, size in enumerate(shape):
        if i < lead:
            if size == -1:
                raise RuntimeError("expand: -1 is not allowed in a leading, non-existing dimension")
            strides.append(0)
            sizes.append(size)
            continue
        own = xs[i - lead]
        if size == -1:
            size = own
        if own == size:
            strides.append(src_strides[i - lead])
        elif own == 1:
            strides.append(0)
        else:
            raise RuntimeError(
                f"expand: the expanded size of the tensor ({size}) must match the existing size "
                f"({own}) at non-singleton dimension {i}.  Target sizes: {list(shape)}.  "
                f"Tensor sizes: {list(xs)}")
        sizes.append(size)
    if tuple(sizes) == xs:
        return x
    return above.strided_view(_OPS["expand"], x, tuple(sizes), tuple(strides), 0)


_provide_to_tensor(cast=cast)


# tape -> (serial, {record: (node name, operands)}): the last record of a composite op
# (cross_entropy's index-and-dot, embedding's gather) shown as torch's one node (graph.py).
_composites = weakref.WeakKeyDictionary()


def name_composite(out, name, *inputs):
    """Show ``out``'s grad_fn as torch's node ``name`` with ``inputs`` (tensors or None) as
    its ``next_functions``.  ``out`` must be the result of the record just written, so
    this is called right after the composite's last op.  Returns ``out``."""
    tape = out._tape
    if tape is None or not out._rg:
        return out
    operands = []
    for t in inputs:
        if not isinstance(t, Tensor) or not t._rg:
            operands.append(None)
        elif t._tape is None:
            operands.append(t)
        elif t._tape is tape:
            operands.append((t._dtype.arena, t._off))
        else:   # recorded on another tape: torch would list it; tapejit joins tapes by loads
            operands.append(None)
    r = tape.n - 1
    row = tape.rec[r]
    if row[1] != out._off or (row[0] & 1) != out._dtype.arena:   # not the last record's result
        return out
    entry = _composites.get(tape)
    if entry is None or entry[0] != tape.serial:
        entry = _composites[tape] = (tape.serial, {})
    entry[1][r] = (name, operands)
    return out


def composite_at(tape, r):
    entry = _composites.get(tape)
    if entry is None or entry[0] != tape.serial:
        return None
    return entry[1].get(r)
