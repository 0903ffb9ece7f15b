"""``tj.compile``: trace a function once per signature, then replay it in Numba.

A signature is what a trace depends on: each argument's kind, shape, dtype and
``requires_grad`` for tensors and float arrays, and the value itself for anything else
(Python numbers, strings, integer and boolean arrays: those are baked into the trace, so
a new value traces again; class labels that only a cross-entropy reads are the exception,
see ``labels.py``).  Float arguments are passed to ``fn`` as tensors, so the trace sees
what ``fn`` does with them.

The forms:

* ``tj.compile(step)`` for a training step: ``step`` may call ``zero_grad()`` and
  ``loss.backward()``; parameters it closes over are read live at every replay and their
  gradients accumulate into ``.grad`` as in eager mode.  Results are plain tensors (no
  ``grad_fn``): a replay runs no Python that could continue their graph.
* ``tj.compile(model)``, or any function returning tensors that require grad without
  calling ``backward()``: each call is one node of the caller's graph (``function.py``).
* ``tj.compile(tj.value_and_grad(f))`` / ``tj.compile(tj.grad(f))``: the same results as
  the eager wrapper (a float and NumPy arrays), replayed.
* ``compiled.batch(*stacked)``: one trace over every row of a leading batch axis, in
  parallel (see ``batch.py``).
"""
import functools
import types
import warnings

import numpy as np

from tapejit import dtypes, functional as F
from tapejit.numpy_mode import from_tensor
from tapejit import labels
from tapejit.replay import tier2 as _tier2
from tapejit.replay.frozen import Frozen, Stale
from tapejit.replay.trace import Trace, refuse, tracing
from tapejit.tape import state
from tapejit.tensor import Tensor, _concrete, _taped

_FLOAT_KINDS = (np.float64, np.float32)


def _is_float_array(x):
    return isinstance(x, np.ndarray) and x.dtype in _FLOAT_KINDS


def _key(x):
    """The part of the signature for one argument (see the module docstring)."""
    if isinstance(x, Tensor):
        if x._dtype.is_floating_point:
            return ("tensor", x._shape, x._dtype.name, bool(x._rg), x._tape is None)
        return ("baked", x._shape, x._dtype.name, x._value().tobytes())
    if isinstance(x, np.ndarray):
        if x.dtype in _FLOAT_KINDS:
            return ("array", x.shape, x.dtype.str)
        return ("baked", x.shape, x.dtype.str, x.tobytes())
    if isinstance(x, (list, tuple)):
        return (type(x).__name__,) + tuple(_key(e) for e in x)
    if type(x) is float:
        return ("float", x.hex())    # -0.0 is not 0.0, and a NaN matches itself
    try:
        hash(x)
    except TypeError:
        return ("object", id(x))
    return ("value", type(x).__name__, x)


def _leaf_key(a):
    if type(a) is np.ndarray:
        return ("leaf", a.shape, a.dtype == np.float32)
    if isinstance(a, Tensor):   # its shape and dtype: no value is computed for the key
        return ("leaf", a._shape, a._dtype is dtypes.float32)
    a = np.asarray(a)
    return ("leaf", a.shape, a.dtype == np.float32)


class _Inputs:
    """The flat list of a call's float inputs (tensors and float arrays, nested lists and
    tuples included), in a fixed order, with their tensors for ``.grad``."""

    def __init__(self):
        self.values = []
        self.leaves = []

    def walk(self, x):
        """``x`` with each float input replaced by its ``_Index`` in ``values``."""
        if isinstance(x, Tensor) and x._dtype.is_floating_point or _is_float_array(x):
            i = len(self.values)
            if isinstance(x, Tensor):
                self.values.append(x._data if x._tape is None else x._value())
                self.leaves.append(x)
            else:
                self.values.append(x)
                self.leaves.append(None)
            return _Index(i)
        if isinstance(x, (list, tuple)):
            return type(x)(self.walk(e) for e in x)
        return x


class _Output:
    """How to rebuild ``fn``'s result after a replay: a tree of tensors from slots,
    arguments, ``.grad`` reads and constants."""

    def __init__(self, trace, arg_of, result):
        self.trace = trace
        self.arg_of = arg_of
        self.slots = []     # (arena, off, shape, dtype) of each result computed by the trace
        self.slot_rg = []   # ... and whether it requires grad
        # Results that require grad from a function that does not call backward() itself:
        # each replay becomes one node of the caller's graph (see function.py).
        self.differentiable = False
        self.stepping = any(e[0] == "backward" for e in trace.events)
        self.spec = self._spec(result)

    def _spec(self, x):
        tape = self.trace.tape
        if isinstance(x, Tensor):
            if x._tape is tape:
                if x._rg and not self.stepping:
                    self.differentiable = True
                self.slots.append((x._dtype.arena, x._off, x._shape, x._dtype))
                self.slot_rg.append(bool(x._rg))
                return ("slot", len(self.slots) - 1)
            if id(x) in self.arg_of:
                return ("arg", self.arg_of[id(x)])
            if type(x) is labels.TracedLabels:
                return ("label", x._position)
            read = self.trace.grads_read.get(id(x))
            if read is not None:
                leaf, _, events = read
                if events != len(self.trace.events):
                    refuse("returning a .grad read before a later backward() or gradient reset",
                           "a replay rebuilds results after all of them.")
                return ("grad", self.arg_of.get(id(leaf)), leaf)
            if id(x) in self.trace.created:
                return ("copy", x)    # made by fn: a new tensor per call, as eager
            return ("const", x)
        if isinstance(x, (list, tuple)):
            return (type(x).__name__, [self._spec(e) for e in x])
        if isinstance(x, dict):
            return ("dict", [(k, self._spec(v)) for k, v in x.items()])
        return ("const", x)

    @property
    def roots(self):
        """The slots the results are read from (what freezing must keep)."""
        return [(d, off) for d, off, _, _ in self.slots]

    def build(self, frozen, leaves, results=None, spec=None, args=None):
        """The result tree; ``results``: the computed tensors in slot order (a differentiable
        call's), else copies of the slots are made here; ``args``: the call's arguments."""
        kind, *rest = self.spec if spec is None else spec
        if kind == "slot":
            if results is not None:
                return results[rest[0]]
            d, off, shape, _ = self.slots[rest[0]]
            return _concrete(frozen.value(d, off, shape))
        if kind == "arg":
            return leaves[rest[0]]
        if kind == "grad":
            arg, leaf = rest
            return (leaves[arg] if arg is not None else leaf).grad
        if kind == "const":
            return rest[0]
        if kind == "copy":
            return _concrete(rest[0]._data.copy(), rg=rest[0]._rg)
        if kind == "label":
            return args[rest[0]]
        if kind == "dict":
            return {k: self.build(frozen, leaves, results, s, args) for k, s in rest[0]}
        items = [self.build(frozen, leaves, results, s, args) for s in rest[0]]
        return tuple(items) if kind == "tuple" else items


class _Entry:
    """One trace of a compiled function: its frozen tape and how to call and answer."""

    def __init__(self, frozen, output, functional=None):
        self.frozen = frozen
        self.output = output
        self.functional = functional
        self.keep = None
        self.call = None     # a DifferentiableCall, when results continue the caller's graph
        self.label_patches = []   # labels.LabelPatch: label arguments that are inputs, not constants
        self.batch_path = None    # how its last batch() ran: "tier2", "rows" (rows.py) or "per-row" (batch.stats)


class Compiled:
    """The result of ``tj.compile(fn)``; see the module docstring."""

    def __init__(self, fn, max_traces=32, tier2=None):
        functools.update_wrapper(self, fn, updated=())   # a module's own __dict__ stays its own
        self.fn = fn
        self.tier2 = _tier2.default_mode() if tier2 is None else _tier2.check_mode(tier2)
        self.functional = getattr(fn, "_tapejit_functional", None)
        self.traces = {}
        self.max_traces = max_traces
        self._warned = False
        self._label_positions = frozenset()
        self._one_array = None   # a shortcut for value_and_grad(f)(x) with one array x
        # Traces whose tier 2 just loaded, timed against tier 1 (tier2.Trial); _trials is
        # this dict, or an empty one while a timed call runs.
        self._pending_trials = self._trials = {}
        self.__name__ = getattr(fn, "__name__", type(fn).__name__)

    def __repr__(self):
        return f"<tj.compile({self.__name__}): {self.stats()}>"

    def __getattr__(self, name):
        """``tj.compile(model)``: the module's attributes (``parameters()``, ``train()``, ...)."""
        fn = self.__dict__.get("fn")
        if fn is None or name.startswith("__"):
            raise AttributeError(name)
        return getattr(fn, name)

    def __get__(self, instance, owner=None):
        """``@tj.compile`` on a method: the instance becomes the first (static) argument."""
        return self if instance is None else types.MethodType(self, instance)

    # ---- what it holds --------------------------------------------------------------------

    def stats(self):
        """Traces, records per trace and bytes of buffers; per trace, the tier its last replay
        ran (1, 2, or None before any) and tier 2's state (``tier2.py``): off, ineligible,
        compiling, ready or failed, why, its compile time in seconds, and whether it was
        kept after timing its first calls against tier 1 (``decision``); how its last
        ``batch()`` ran and the state of the row module and of batch's tier 2 for it
        (``batch.stats``; None before any)."""
        entries = list(self.traces.values())
        return {"traces": len(entries),
                "records": [e.frozen.records for e in entries],
                "records_traced": [e.frozen.records_traced for e in entries],
                "bytes": sum(e.frozen.nbytes for e in entries),
                "batch": _batch_stats(entries),
                "tier": [e.frozen.last_tier for e in entries],
                "tier2": [e.frozen.tier2.stats() if e.frozen.tier2 is not None else None for e in entries]}

    # ---- calls ----------------------------------------------------------------------------

    def __call__(self, *args, **kwargs):
        if self._trials:                 # tier 2 just loaded: which tier is faster (tier2.Trial)
            return _tier2.timed_call(self, self._trials, args, kwargs)
        one = self._one_array
        if one is not None and len(args) == 1 and not kwargs and type(args[0]) is np.ndarray:
            result = one(args[0])       # f(x) of one float array: the numeric scripts' call
            if result is not None:
                return result
        if state.trace is not None:      # called while another function is traced: inline it
            return self.fn(*args, **kwargs)
        if self.functional is not None:
            F.check_not_nested(args, kwargs, self.functional[4])
        key = self.signature(args, kwargs)
        entry = self.traces.get(key)
        if entry is None and self._label_positions:
            entry = self.traces.get(self.signature(args, kwargs, self._label_positions))
            if entry is not None:
                result = self._replay_or_stale(entry, args, kwargs)
                if result is not _NEEDS_TRACE:
                    return result
                entry = None
        if entry is None:
            entry, result = self._trace(args, kwargs)
            flat = key if not kwargs else key[0] + tuple(v for _, v in key[1])
            if any(type(k) is tuple and k[0] == "object" for k in flat):
                entry.keep = (args, kwargs)    # their ids are in the key: keep them alive
            self._make_room()
            if entry.label_patches:
                # Its labels are inputs: the trace serves every call with labels of that shape.
                self._label_positions = frozenset(p.position for p in entry.label_patches)
                key = self.signature(args, kwargs, self._label_positions)
            self.traces[key] = entry
            return result
        result = self._replay_or_stale(entry, args, kwargs)
        if result is _NEEDS_TRACE:
            return self(*args, **kwargs)
        return result

    def _replay_or_stale(self, entry, args, kwargs):
        """A replay, or ``_NEEDS_TRACE`` after dropping a trace whose live tensors changed."""
        try:
            return self._replay(entry, args, kwargs)
        except Stale:
            for key, other in list(self.traces.items()):
                if other is entry:
                    del self.traces[key]
            if self._one_array is not None and self._one_array.entry is entry:
                self._one_array = None
            return _NEEDS_TRACE

    def _make_room(self):
        """Drop the oldest trace beyond ``max_traces``: a signature that changes on every call
        (labels or Python numbers baked into it) must not grow memory without bound."""
        while len(self.traces) >= self.max_traces:
            del self.traces[next(iter(self.traces))]
            if not self._warned:
                self._warned = True
                warnings.warn(
                    f"tj.compile({self.__name__}): more than {self.max_traces} signatures traced, "
                    f"dropping the oldest. Integer or boolean arrays (labels), Python numbers and "
                    f"other non-float arguments are part of the signature, so a new value traces "
                    f"again at eager speed; pass values that change between calls as float "
                    f"tensors, or raise max_traces.", RuntimeWarning, stacklevel=3)

    def signature(self, args, kwargs, label_positions=()):
        """What a trace depends on (see the module docstring); ``label_positions``: int64
        arguments keyed by shape alone (their values are patched in, see labels.py)."""
        if self.functional is None:
            # Grad mode too: under no_grad the same code records no graph and calls no backward.
            keys = tuple([("labels", a._shape, a._dtype.name) if i in label_positions and isinstance(a, Tensor)
                          else _key(a)
                          for i, a in enumerate(args)] + [state.grad])
        else:
            # Differentiated arguments become float leaves whatever they are (a Python float,
            # an int array): only their shape and the leaf's dtype matter.
            nums = self.functional[1]
            n = len(args)
            keys = tuple([_leaf_key(a) if (i in nums or i - n in nums) else _key(a)
                          for i, a in enumerate(args)])
        tensors = [id(a) for a in args if isinstance(a, Tensor)]
        if len(set(tensors)) != len(tensors):
            # The same tensor passed twice: one leaf, one slot; other tensors need another trace.
            first = {}
            keys += (("aliased", tuple(first.setdefault(i, k) for k, i in enumerate(tensors))),)
        if kwargs:
            return keys, tuple(sorted((k, _key(v)) for k, v in kwargs.items()))
        return keys

    def _flatten(self, args, kwargs):
        inputs = _Inputs()
        args = inputs.walk(list(args))
        kwargs = {k: inputs.walk(v) for k, v in kwargs.items()}
        return inputs, args, kwargs

    def _replay(self, entry, args, kwargs):
        if self.functional is not None:
            return self._replay_functional(entry, args, kwargs)
        inputs, _, _ = self._flatten(args, kwargs)
        frozen = entry.frozen
        patches = [(patch, args[patch.position]._value()) for patch in entry.label_patches]
        if not all(patch.fits(values) for patch, values in patches):
            return _NEEDS_TRACE
        if entry.call is not None:
            for event in frozen.events:      # zero_grad() inside fn: before this call's graph
                event[1](*event[2])
            results = entry.call.apply(inputs.values, inputs.leaves, patches)
            return entry.output.build(frozen, inputs.leaves, results, args=args)
        with frozen.lock:
            for patch, values in patches:
                patch.write(frozen.tape.ints, values)
            frozen.run(inputs.values, inputs.leaves)
            return entry.output.build(frozen, inputs.leaves, args=args)

    def _trace(self, args, kwargs):
        if self.functional is not None:
            return self._trace_functional(args, kwargs)
        trace = Trace(self.__name__)
        inputs, flat_args, flat_kwargs = self._flatten(args, kwargs)
        arg_of = {}
        with tracing(trace):
            call_args = [_placeholder(trace, inputs, a, arg_of) for a in flat_args]
            for i, a in enumerate(call_args):
                if isinstance(a, Tensor) and a._dtype is dtypes.int64 and a._tape is None:
                    call_args[i] = labels.placeholder(trace, a, i)
                    trace.note_readable(call_args[i])
                elif isinstance(a, Tensor) and not a._dtype.is_floating_point:
                    trace.note_readable(a)   # its values are part of the signature
            call_kwargs = {k: _placeholder(trace, inputs, v, arg_of) for k, v in flat_kwargs.items()}
            result = self.fn(*call_args, **call_kwargs)
            output = _Output(trace, arg_of, result)
        if trace.graph_args and not output.differentiable:
            refuse(f"argument {trace.graph_args[0]}, a tensor with a graph (it requires grad and is "
                   f"not a leaf), in a function that calls backward()",
                   "a replayed step cannot continue a graph recorded outside it. Pass leaf "
                   "tensors, or detach() it.", name=trace.name)
        frozen = Frozen(trace, arg_of, output.roots)
        entry = _Entry(frozen, output)
        if not output.differentiable:   # a differentiable call's replays run the sweeps (function.py)
            _tier2.attach(frozen, self.tier2, self._pending_trials)
        entry.label_patches = [p for p in trace.label_patches if p.position in labels.patchable(trace)]
        if output.differentiable:
            from tapejit.replay.function import DifferentiableCall   # ~1.5 ms of start-up, for tj.grad only
            entry.call = DifferentiableCall(frozen, output.slots, output.slot_rg)
            # The first call's results too come from a replay, so they join the caller's graph.
            return entry, self._replay(entry, args, kwargs)
        return entry, output.build(frozen, inputs.leaves, args=args)

    # ---- tj.compile(tj.value_and_grad(f)) / tj.compile(tj.grad(f)) --------------------------

    def _trace_functional(self, args, kwargs):
        fun, nums, single, has_aux, kind = self.functional
        name = f"{kind}({getattr(fun, '__name__', 'f')})"
        if max(nums) >= len(args) or min(nums) < -len(args):
            raise TypeError(f"{kind}: argnums {nums!r} is out of range for {len(args)} positional arguments")
        trace = Trace(name)
        args = list(args)
        differentiated = list(dict.fromkeys(i % len(args) for i in nums))
        arg_of = {}
        leaves = {}
        with tracing(trace):
            call_args = list(args)
            # fn sees NumPy-mode traced arrays (tapejit/numpy_mode.py), as the eager wrapper's.
            for i, a in enumerate(args):
                if i in differentiated:
                    leaf = F._leaf(a, kind, i)
                    leaves[i] = leaf
                    arg_of[id(leaf)] = i
                    call_args[i] = from_tensor(_stand_in(trace, leaf))
                elif isinstance(a, Tensor) and a._dtype.is_floating_point or _is_float_array(a):
                    call_args[i] = from_tensor(_load_input(trace, a, i, arg_of))
                elif isinstance(a, Tensor):
                    trace.note_readable(a)   # its values are part of the signature
                elif _holds_float_arrays(a):
                    refuse(f"{kind}: a float array inside argument {i}",
                           "only top-level positional float arrays are replay inputs; nested ones "
                           "would be frozen. Pass them as positional arguments.")
            if any(_holds_float_arrays(v) for v in kwargs.values()):
                refuse(f"{kind}: a float array in a keyword argument",
                       "only positional float arrays are replay inputs; keyword ones would be "
                       "frozen. Pass them as positional arguments.")
            out, aux = F.call_for_value(fun, call_args, kwargs, has_aux, kind)
            aux, aux_marks = F.aux_for_trace(aux)
            F.check_not_nested((), {}, kind, [out, *F._tensors_in(aux)],
                               {id(leaf) for leaf in leaves.values()}, trace.tape.serial)
            if not (isinstance(out, Tensor) and out._tape is trace.tape):
                refuse("a function whose value does not depend on its arguments",
                       "there is nothing to replay.")
            if out._rg:
                trace.events.append(("backward", [(out._dtype.arena, out._off, 1, None)],
                                     [leaves[i] for i in differentiated]))
            output = _Output(trace, arg_of, aux)
        roots = output.roots + [(out._dtype.arena, out._off)]
        frozen = Frozen(trace, arg_of, roots)
        _tier2.attach(frozen, self.tier2, self._pending_trials)
        # Where each differentiated argument's gradient is after a replay (absent: unused, zero).
        slots = {}
        for event in frozen.events:
            for d, off, n, shape, arg, _ in event[1].deliveries:
                slots[arg] = (d, off, n, shape)
        entry = _Entry(frozen, output, functional=(out._dtype.arena, out._off, nums, single, differentiated,
                                                   {i: (leaves[i]._shape, leaves[i]._dtype.np) for i in leaves},
                                                   slots))
        entry.aux_marks = aux_marks
        if len(args) == 1 and not kwargs and not has_aux and type(args[0]) is np.ndarray:
            self._one_array = _one_array_call(entry, args[0], kind)
        values = [None] * len(args)
        for i in differentiated:
            values[i] = leaves[i]._data
        for i, a in enumerate(args):
            if i not in differentiated and (isinstance(a, Tensor) and a._dtype.is_floating_point
                                            or _is_float_array(a)):
                values[i] = a._value() if isinstance(a, Tensor) else a
        with frozen.lock:
            return entry, self._answer(entry, values, args)

    def _replay_functional(self, entry, args, kwargs):
        values = []
        differentiated = entry.functional[4]
        for i, a in enumerate(args):
            if type(a) is not np.ndarray:
                if isinstance(a, Tensor):
                    a = a._data if a._tape is None else a._value()
                a = np.asarray(a) if i in differentiated or _is_float_array(a) else None
            values.append(a)
        with entry.frozen.lock:
            return self._answer(entry, values, args)

    def _answer(self, entry, values, args):
        d, off, nums, single, differentiated, shapes, slots = entry.functional
        has_aux, kind = self.functional[3:]
        frozen = entry.frozen
        frozen.run(values, None)
        tape = frozen.tape
        value = float(tape.vals[d][off])
        grads = []
        for i in nums:
            i %= len(args)
            slot = slots.get(i)
            if slot is None:
                shape, dt = shapes[i]
                grads.append(np.zeros(shape, dt))
            else:
                ad, aoff, n, shape = slot
                grads.append(tape.adj[ad][aoff:aoff + n].reshape(shape).copy())
        grads = grads[0] if single else tuple(grads)
        aux = None
        if has_aux:
            aux = F.aux_from_trace(entry.output.build(frozen, [None] * len(values)), entry.aux_marks)
        if kind == "grad":
            return (grads, aux) if has_aux else grads
        return ((value, aux) if has_aux else value), grads

    # ---- batched replay -------------------------------------------------------------------

    def batch(self, *stacked, **kwargs):
        """Evaluate the trace for every row of the stacked arguments, in parallel."""
        from tapejit.replay.batch import run_batch   # ~3 ms of start-up, for batched calls only
        return run_batch(self, stacked, kwargs)


def _one_array_call(entry, traced, kind):
    """``tj.compile(tj.value_and_grad(f))(x)`` for one float array ``x``, with nothing but
    the replay itself: the signature is a shape and dtype compare; None on a mismatch (the
    general path then finds or makes the trace)."""
    frozen = entry.frozen
    d, off, _, single, _, shapes, slots = entry.functional
    has_tier2 = frozen.tier2 is not None and frozen.tier2.state in ("compiling", "ready")
    if (not single or (frozen._fast is None and not has_tier2) or frozen.live_loads
            or traced.dtype not in _FLOAT_KINDS or any(e[0] == "call" for e in frozen.events)):
        return None
    shape, dtype = traced.shape, traced.dtype
    loads = [(vals_off, n) for _, vals_off, n, _ in frozen.arg_loads]
    vals, adj = frozen.tape.vals[d], frozen.tape.adj[d]
    grad_shape, grad_dtype = shapes[0]
    slot = slots.get(0)
    replay, lock = frozen.replay_sweep, frozen.lock
    args = frozen._fast_args if frozen._fast is not None else None
    value_only = kind == "value_and_grad"

    def call(x):
        if x.shape != shape or x.dtype != dtype or state.trace is not None:
            return None
        tier2 = frozen.tier2_call
        if tier2 is None and args is None:
            return None     # tier 1 runs run by run (large arrays): the general path
        with lock:
            flat = x.reshape(-1)
            if tier2 is not None and not tier2.small:   # reads x in place, writes the gradient to a new array
                for _, at, n, _ in tier2.copied:
                    vals[at:at + n] = flat
                outs = tier2.fresh_outs()
                frozen.check(tier2.fn((_tier2.plain(flat, dtype),) * len(tier2.direct_in), outs))
                frozen.last_tier = 2
                k = None if slot is None else tier2.out_of.get(slot[1])
                if k is not None:
                    value = float(vals[off])
                    g = outs[k].reshape(grad_shape)
                    return (value, g) if value_only else g
            else:
                for at, n in loads:
                    vals[at:at + n] = flat
                if tier2 is not None:
                    frozen.check(tier2.fn(tier2.arena_ins, tier2.arena_outs))
                    frozen.last_tier = 2
                else:
                    frozen.check(replay(*args))
                    frozen.last_tier = 1
            value = float(vals[off])
            if slot is None:
                g = np.zeros(grad_shape, grad_dtype)
            else:
                g = adj[slot[1]:slot[1] + slot[2]].reshape(grad_shape).copy()
        return (value, g) if value_only else g
    call.entry = entry
    return call


def _load_input(trace, x, i, arg_of):
    """Argument ``i`` on the trace's tape, as a tensor ``fn`` receives: a load record whose
    slot each replay refills."""
    if not isinstance(x, Tensor):
        x = _concrete(np.ascontiguousarray(x))
    elif x._tape is not None:
        if x._rg:
            refuse(f"argument {i}, a tensor with a graph (it requires grad and is not a leaf)",
                   "a replay cannot continue a graph recorded outside the function. Pass leaf "
                   "tensors, or detach() it.")
        x = _concrete(np.array(x._value()))
    tape = trace.tape
    dt = x._dtype
    off = tape.load(x, dt)
    arg_of[id(x)] = i
    return _taped(tape, off, x._shape, x._numel, dt, False)


def _placeholder(trace, inputs, a, arg_of):
    """What ``fn`` receives for one (flattened) argument: indices from ``_flatten`` become a
    leaf argument (it requires grad: passed as is) or a loaded input."""
    if isinstance(a, (list, tuple)):
        return type(a)(_placeholder(trace, inputs, e, arg_of) for e in a)
    if not isinstance(a, _Index):
        return a
    x = inputs.leaves[a] if inputs.leaves[a] is not None else inputs.values[a]
    if isinstance(x, Tensor) and x._rg:
        if x._tape is not None:
            # A tensor with a graph: traced as a leaf of its own; its gradient goes back into
            # the caller's graph through the replay's node (function.py), or it is refused.
            trace.graph_args.append(int(a))
            x = _concrete(np.array(inputs.values[a]), rg=True)
        arg_of[id(x)] = a
        return _stand_in(trace, x)
    return _load_input(trace, x, a, arg_of)


def _holds_float_arrays(x):
    if isinstance(x, Tensor) and x._dtype.is_floating_point or _is_float_array(x):
        return True
    if isinstance(x, (list, tuple)):
        return any(_holds_float_arrays(e) for e in x)
    if isinstance(x, dict):
        return any(_holds_float_arrays(e) for e in x.values())
    return False


def _stand_in(trace, leaf):
    """What ``fn`` gets for an argument that requires grad: its load on the trace's tape, so
    reading its value in Python is refused like any traced value's; its gradient still
    reaches ``leaf`` (``leaf.grad`` inside ``fn`` reads it, see ``Tensor.grad``)."""
    tape = trace.tape
    off = tape.load(leaf, leaf._dtype)
    t = _taped(tape, off, leaf._shape, leaf._numel, leaf._dtype, leaf._rg and state.grad)
    trace.placeholders[id(t)] = leaf
    trace._keep.append(t)
    return t


_NEEDS_TRACE = object()   # a replay that cannot take this call's labels (see labels.py)


class _Index(int):
    """A flattened argument's position (tells it apart from an int argument)."""



def _batch_stats(entries):
    if all(e.batch_path is None for e in entries):
        return [None] * len(entries)
    from tapejit.replay.batch import stats   # imported already by the batch() that ran
    return [None if e.batch_path is None else stats(e) for e in entries]


def compile(fn=None, *, max_traces=32, tier2=None):
    """``tj.compile(fn)``, ``@tj.compile`` or ``@tj.compile(max_traces=...)``: see
    ``tapejit.replay.compiled``.  ``max_traces`` bounds the signatures kept per function;
    ``tier2``: True compiles each trace's fused function in the background (``tier2.py``),
    ``"sync"`` before its first replay, False never (default: ``$TAPEJIT_TIER2``, else True)."""
    if not isinstance(max_traces, int) or max_traces < 1:
        raise ValueError(f"tj.compile: max_traces must be a positive int, got {max_traces!r}")
    if tier2 is not None:
        _tier2.check_mode(tier2)
    if fn is None:
        return functools.partial(compile, max_traces=max_traces, tier2=tier2)
    if isinstance(fn, Compiled):
        return fn
    return Compiled(fn, max_traces, tier2)
