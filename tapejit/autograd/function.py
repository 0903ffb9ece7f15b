"""``tj.autograd.Function``: custom ops with a Python ``backward``.

``Fn.apply(*args)`` runs ``forward`` without recording, then puts each differentiable
output on the tape as a load of its value whose source is the call's context.  The
context is also the output's ``grad_fn`` (``FnBackward``, as in torch, where ``ctx`` is
the node).  The engine stops the compiled sweep just above those loads, hands the output
adjoints to ``backward`` in Python, adds the returned gradients into the inputs' slots,
and resumes the compiled sweep below: one Python call per custom op, none per record.
"""
import weakref

import numpy as np

from tapejit.engine import FREED
from tapejit.grad_mode import no_grad
from tapejit.graph import _node_at
from tapejit.printing import type_name
from tapejit.recording import operand
from tapejit.tape import current, state
from tapejit.tensor import Tensor, _concrete, _taped

_ctx_classes = {}


class BackwardFunction:
    """The ``ctx`` of one ``Fn.apply`` call and the ``grad_fn`` of its outputs."""

    def __init__(self, fn_cls):
        self._fn_cls = fn_cls
        self._saved = ()
        self._saved_versions = ()
        self._freed = False
        self._materialize = True
        self._non_differentiable = set()
        self._tape_ref = None
        self._inputs = []     # per positional argument: None, or (tensor, arena, offset)
        self._outputs = []    # per differentiable output: (arena, offset, shape, dtype)
        # per output of forward, what backward receives for it: an index into _outputs, the
        # (shape, NumPy dtype) of a non-differentiable tensor (zeros, or None without
        # materialized grads), or None (not a tensor): torch passes one argument per output
        self._grad_slots = ()
        self._stop = None     # record index just above this call's output loads
        self.needs_input_grad = ()

    # ---- the ctx API ---------------------------------------------------------------------

    def save_for_backward(self, *tensors):
        for t in tensors:
            if t is not None and not isinstance(t, Tensor):
                raise TypeError(
                    f"save_for_backward can only save variables, but argument {tensors.index(t)} "
                    f"is not a Tensor (got {type(t).__name__}); store other values as ctx attributes")
        self._saved = tensors
        self._saved_versions = tuple(None if t is None else getattr(t, "_version", 0) for t in tensors)

    @property
    def saved_tensors(self):
        if self._freed:
            raise RuntimeError(FREED)
        for i, (t, version) in enumerate(zip(self._saved, self._saved_versions)):
            if t is not None and getattr(t, "_version", 0) != version:
                raise RuntimeError(
                    f"one of the variables needed for gradient computation has been modified by "
                    f"an inplace operation: [{type_name(t)} {list(t._shape)}], which is saved "
                    f"tensor {i} of {self.name()}, is at version {t._version}; expected version "
                    f"{version} instead.")
        return self._saved

    def mark_non_differentiable(self, *tensors):
        self._non_differentiable.update(id(t) for t in tensors)

    def set_materialize_grads(self, value):
        self._materialize = bool(value)

    def mark_dirty(self, *tensors):
        raise NotImplementedError(
            f"{self._fn_cls.__name__}: tapejit does not support in-place custom Functions "
            f"(ctx.mark_dirty); return a new tensor from forward instead")

    # ---- the grad_fn node ----------------------------------------------------------------

    def name(self):
        return type(self).__name__

    def __repr__(self):
        return f"<{self.name()} object at {id(self):#x}>"

    @property
    def next_functions(self):
        tape = self._tape_ref() if self._tape_ref is not None else None
        result = []
        for entry in self._inputs:
            if entry is None:
                continue
            _, arena, off = entry
            if off is None or tape is None:
                result.append((None, 0))
            else:
                result.append((_node_at(tape, arena, off), 0))
        return tuple(result)

    def register_hook(self, fn):
        raise NotImplementedError("tapejit: hooks on grad_fn nodes are not supported; use Tensor.register_hook")

    # ---- called by the engine ------------------------------------------------------------

    def run_backward(self, tape, retain, needed=True):
        """Hand the outputs' adjoints to ``backward`` and add its results into the inputs'
        slots.  Does nothing when no output received a gradient, or when not ``needed`` (no
        input leads to what ``autograd.grad`` asked for) but drop the outputs' gradients."""
        grads = []
        received = False
        for arena, off, shape, dt in self._outputs:
            flags = tape.flags[arena]
            if flags[off]:
                flags[off] = 0
                received = True
                if needed:
                    grads.append(_concrete(tape.adj[arena][off:off + _size(shape)].reshape(shape).copy()))
            elif needed:
                grads.append(_concrete(np.zeros(shape, dt.np)) if self._materialize else None)
        if not received or not needed:
            return
        if self._freed:
            raise RuntimeError(FREED)
        materialize = self._materialize
        grads = [grads[slot] if type(slot) is int
                 else _concrete(np.zeros(*slot)) if slot is not None and materialize else None
                 for slot in self._grad_slots]
        results = self._call_backward(grads)
        for i, entry in enumerate(self._inputs):
            if entry is None or entry[2] is None or results[i] is None:
                continue
            t, arena, off = entry
            g = self._checked_gradient(i, t, results[i])
            n = t._numel
            if tape.flags[arena][off]:
                tape.adj[arena][off:off + n] += g
            else:
                tape.adj[arena][off:off + n] = g
                tape.flags[arena][off] = 1
        if not retain:
            self._freed = True
            self._saved = ()

    def _call_backward(self, grads):
        # Ops inside ``backward`` run without recording, on a tape of their own: the tape
        # being swept must not change under the engine.
        swept = state.tape
        state.tape = None
        try:
            with no_grad():
                results = self._fn_cls.backward(self, *grads)
        finally:
            state.tape = swept
        if not isinstance(results, tuple):
            results = (results,)
        expected = len(self._inputs)
        if len(results) < expected or any(r is not None for r in results[expected:]):
            raise RuntimeError(
                f"function {self.name()} returned an incorrect number of gradients "
                f"(expected {expected}, got {len(results)})")
        return results[:expected]

    def _checked_gradient(self, i, t, g):
        if not isinstance(g, Tensor):
            raise TypeError(
                f"function {self.name()} returned a gradient of type {type(g).__name__} at "
                f"index {i}; expected a Tensor or None")
        value = g._value()
        if value.shape != t._shape:
            try:
                np.broadcast_shapes(t._shape, value.shape)
                expandable = np.broadcast_shapes(t._shape, value.shape) == value.shape
            except ValueError:
                expandable = False
            if not expandable:
                raise RuntimeError(
                    f"Function {self.name()} returned an invalid gradient at index {i} - got "
                    f"{list(value.shape)} but expected shape compatible with {list(t._shape)}")
            value = _sum_to(value, t._shape)
        return np.asarray(value, t._dtype.np).reshape(-1)


def _size(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def _sum_to(value, shape):
    lead = value.ndim - len(shape)
    value = value.sum(axis=tuple(range(lead))) if lead else value
    axes = tuple(i for i, s in enumerate(shape) if s == 1 and value.shape[i] != 1)
    return value.sum(axis=axes, keepdims=True) if axes else value


def _ctx_class(fn_cls):
    cls = _ctx_classes.get(fn_cls)
    if cls is None:
        cls = _ctx_classes[fn_cls] = type(f"{fn_cls.__name__}Backward", (BackwardFunction,), {})
    return cls


class Function:
    """Subclass with ``forward(ctx, *args)`` and ``backward(ctx, *grad_outputs)`` as static
    methods (or ``forward(*args)`` plus ``setup_context(ctx, inputs, output)``), then call
    ``Fn.apply(*args)``."""

    def __init__(self, *args, **kwargs):
        pass

    def __call__(self, *args, **kwargs):
        raise RuntimeError(
            "Legacy autograd function with non-static forward method is deprecated. Please use "
            "new-style autograd function with static forward method.")

    @staticmethod
    def forward(ctx, *args, **kwargs):
        raise NotImplementedError("You must implement the forward function for custom autograd.Function.")

    @staticmethod
    def backward(ctx, *grad_outputs):
        raise NotImplementedError(
            "You must implement either the backward or vjp method for your custom "
            "autograd.Function to use it with backward mode AD.")

    setup_context = None

    @classmethod
    def apply(cls, *args, **kwargs):
        if state.trace is not None:
            state.trace.refuse(f"the custom autograd.Function {cls.__name__}", "its backward is "
                               "Python code, which a replay does not run.")
        ctx = _ctx_class(cls)(cls)
        grad_on = state.grad
        ctx.needs_input_grad = tuple(isinstance(a, Tensor) and a._rg and grad_on for a in args)
        with no_grad():
            if cls.setup_context is not None:
                out = cls.forward(*args, **kwargs)
                cls.setup_context(ctx, args, out)
            else:
                out = cls.forward(ctx, *args, **kwargs)
        if not any(ctx.needs_input_grad):
            return out
        return _record(ctx, args, out)


def _record(ctx, args, out):
    tape = current()
    ctx._tape_ref = weakref.ref(tape)
    for a, needs in zip(args, ctx.needs_input_grad):
        if not isinstance(a, Tensor):
            ctx._inputs.append(None)
        elif not needs:
            ctx._inputs.append((a, a._dtype.arena, None))
        else:
            ctx._inputs.append((a, a._dtype.arena, operand(tape, a, a._dtype)))
    single = not isinstance(out, tuple)
    outs = (out,) if single else out
    results = []
    slots = []
    first = tape.n
    for o in outs:
        if not isinstance(o, Tensor):
            slots.append(None)
        elif o._dtype.is_floating_point and id(o) not in ctx._non_differentiable:
            dt = o._dtype
            off = tape.load_value(o._value(), dt, ctx)
            slots.append(len(ctx._outputs))
            ctx._outputs.append((dt.arena, off, o._shape, dt))
            o = _taped(tape, off, o._shape, o._numel, dt, True)
        else:
            slots.append((o._shape, o._dtype.np))
        results.append(o)
    ctx._grad_slots = slots
    if not ctx._outputs:
        return out
    ctx._stop = tape.n
    tape.note_function(ctx, first)
    return results[0] if single else tuple(results)


def once_differentiable(fn):
    """Accepted for PyTorch compatibility: backward never records here anyway."""
    return fn
