"""Recording a trace: ``fn``'s first call, run eagerly on a tape of its own.

While a ``Trace`` is active on a thread (``state.trace``), the thread records like
``recording.eager`` does -- every float op goes on the tape, even one that needs no
gradient -- and keeps the records: a value computed from an input must be recomputed on
every replay, not frozen as a constant.  The same hooks refuse what a replay could not
repeat (see ``refuse``): reading a traced value into Python, random numbers, in-place
changes of tensors made outside ``fn``, optimizer steps, custom ``Function``s, hooks on
intermediate tensors.  Python side effects a replay *can* repeat -- ``backward()``,
``zero_grad()``, ``p.grad = None`` -- are kept as ``events``, in order.
"""
import os
import sys

from tapejit import engine
from tapejit.tape import Tape, state
from tapejit.tensor import Tensor


class CompileError(RuntimeError):
    """``tj.compile`` cannot replay what ``fn`` did on its first call."""


_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

_FRIENDLY = {
    "__bool__": "bool(tensor) (an `if`, `while`, `and` or `or` on a tensor)",
    "__float__": "float(tensor)", "__int__": "int(tensor)", "__index__": "using a tensor as an index",
    "item": "tensor.item()", "tolist": "tensor.tolist()", "numpy": "tensor.numpy()",
    "__array__": "np.asarray(tensor)", "__repr__": "printing a tensor", "__str__": "printing a tensor",
    "__format__": "formatting a tensor",
    "__gt__": "the comparison `>`", "__ge__": "the comparison `>=`", "__lt__": "the comparison `<`",
    "__le__": "the comparison `<=`", "__eq__": "the comparison `==`", "__ne__": "the comparison `!=`",
    "compare": "a tensor comparison (`<`, `>`, `==`, ...)",
}


def _caller():
    """``(operation, "file:line")``: the tapejit function user code called, and where."""
    frame = sys._getframe(2)
    inner = None
    while frame is not None:
        path = os.path.abspath(frame.f_code.co_filename)
        if not path.startswith(_PACKAGE + os.sep):
            name = inner.f_code.co_name if inner is not None else "a tapejit operation"
            return _FRIENDLY.get(name, name), f"{frame.f_code.co_filename}:{frame.f_lineno}"
        inner = frame
        frame = frame.f_back
    return "a tapejit operation", "?"


def refuse(what, why, where=None, name=None):
    """Raise the CompileError for ``what``; ``name``: the compiled function's, when called
    after tracing (freezing); ``where`` the place, else the caller's line."""
    trace = state.trace
    name = name or (trace.name if trace is not None else "the function")
    at = f" at {where or _caller()[1]}" if where or trace is not None else ""
    raise CompileError(
        f"tj.compile({name}): {what}{at}: {why} Call {name} without tj.compile (eager "
        f"mode runs Python on every call), or move this out of the compiled function.")


def refuse_read():
    """A traced tensor's value is read into Python (``Tensor._value`` on a tracing tape)."""
    what, where = _caller()
    refuse(f"{what} reads a traced tensor's value into Python", (
        "a replay does not run Python, so it would silently reuse the value (and the branch "
        "taken) from the first call. Keep the computation in tensor ops (e.g. tj.where "
        "instead of `if`)."), where)


def refuse_random(what):
    refuse(what, "a replay would reuse the first call's random numbers; tj.compile refuses "
                 "random ops instead of freezing them. Draw the random tensor outside and pass it "
                 "as an argument.")


def check_write(t):
    """An in-place change of concrete tensor ``t`` while tracing."""
    trace = state.trace
    if trace is not None and id(t) not in trace.created:
        refuse(f"an in-place change of a {list(t._shape)} tensor made outside the function",
               "a replay does not repeat Python side effects on tensors such as parameters or "
               "buffers (optimizer.step(), running statistics).")


def set_grad(t, value):
    """``t.grad = value`` while tracing: ``None`` is repeated on replay, a tensor is refused."""
    if value is not None:
        refuse("assigning a tensor to .grad", "a replay does not repeat Python assignments.")
    state.trace.note_call(_set_grad_none, t)


def _set_grad_none(t):
    t._grad = None


def side_effect(function, *args):
    """Run ``function(*args)`` (a gradient reset such as ``zero_grad``) now, outside the trace's
    checks, and again after each replay's forward pass, at the same point among backward()s."""
    trace = state.trace
    trace.note_call(function, *args)
    state.trace = None
    try:
        function(*args)
    finally:
        state.trace = trace


class Trace:
    """What ``fn``'s first call did: its tape (``tape``) and its Python ``events``.

    While active (``state.trace``) it is also the interface the eager core calls, without
    importing replay/: ``on_read``, ``on_random``, ``on_write``, ``on_set_grad``,
    ``on_backward`` and ``refuse``.
    """

    def __init__(self, name):
        self.name = name
        self.tape = Tape()
        self.tape.tracing = True
        self.tape.trace = self
        # ("backward", roots, inputs) | ("call", function, args): run in order after the
        # forward pass of each replay.
        self.events = []
        self.created = set()     # ids of tensors made while tracing: constants, written freely
        # ids of tensors whose values fn may read into Python: those made while tracing, and
        # arguments whose values are part of the signature (integer arrays)
        self.readable = set()
        self._keep = []          # ... kept alive, so their ids are not reused
        self.placeholders = {}   # id(taped stand-in) -> the argument leaf it stands for
        self.grads_read = {}     # id(.grad tensor read after a backward) -> (leaf, tensor)
        self.graph_args = []     # arguments that require grad and have a graph (not leaves)
        self.labels_read = set()
        self.label_patches = []
        self.backward_done = False

    def note_created(self, t):
        self.created.add(id(t))
        self.note_readable(t)

    def note_external(self, t):
        """``t`` shares an array of the caller's (``from_numpy``): read live, like a parameter."""
        self.created.discard(id(t))
        self.readable.discard(id(t))

    def note_readable(self, t):
        self.readable.add(id(t))
        self._keep.append(t)

    def note_call(self, function, *args):
        """A Python side effect that only concerns gradients (``zero_grad``): repeated on replay."""
        self.events.append(("call", function, args))

    def note_grad_read(self, leaf, g):
        if self.backward_done and g is not None:
            self.grads_read[id(g)] = (leaf, g, len(self.events))

    # ---- the interface the eager core calls (tensor, creation, inplace, engine, ...) -------
    def on_read(self, t):
        """``t``'s value is read into Python: refused (see ``refuse_read``)."""
        refuse_read()

    def on_random(self):
        """A random op is called: refused (see ``refuse_random``)."""
        refuse_random(_caller()[0])

    def on_write(self, t):
        """An in-place change of concrete tensor ``t`` (see ``check_write``)."""
        check_write(t)

    def on_set_grad(self, t, value):
        """``t.grad = value`` (see ``set_grad``)."""
        set_grad(t, value)

    def on_backward(self, tensors, grad_tensors, retain_graph, create_graph, inputs):
        """``backward()``: run now and kept for the replays (see ``backward``)."""
        return backward(self, tensors, grad_tensors, retain_graph, create_graph, inputs)

    @staticmethod
    def refuse(what, why):
        """Raise the CompileError for ``what`` at the user's line (see ``refuse``)."""
        refuse(what, why)


class tracing:
    """Run the body with ``trace`` recording on this thread."""

    def __init__(self, trace):
        self.trace = trace

    def __enter__(self):
        if state.trace is not None:
            raise CompileError("tj.compile: a compiled function is being traced already on this thread")
        self.saved = (state.tape, state.eager)
        state.tape = self.trace.tape
        state.eager = True
        state.trace = self.trace
        return self.trace

    def __exit__(self, *exc):
        state.tape, state.eager = self.saved
        state.trace = None
        # Tensors left from the trace stay readable (in a traceback, say); the frozen tape is
        # not any thread's current tape, so nothing records on it again.
        self.trace.tape.tracing = False
        return False


def backward(trace, tensors, grad_tensors, retain_graph, create_graph, inputs):
    """``backward()`` inside a trace: run it now (the first call's gradients) and keep it as an
    event for the replays."""
    if create_graph:
        refuse("backward(create_graph=True)", (
            "a traced function records its backward pass only through tj.grad, tj.hvp, "
            "tj.hessian or tj.jacobian (tj.compile(tj.hvp(f)) traces the Hessian-vector "
            "product once and replays it)."))
    tape = trace.tape
    if tape.hooks or tape.retained:
        refuse("backward() through a tensor with register_hook or retain_grad",
               "hooks on intermediate tensors run Python in the middle of the backward sweep.")
    roots = [tensors] if isinstance(tensors, Tensor) else list(tensors)
    if grad_tensors is None:
        grads = [None] * len(roots)
    else:
        grads = [grad_tensors] if isinstance(grad_tensors, Tensor) else list(grad_tensors)
    entries = []
    seeds = []
    for t, g in zip(roots, grads):
        if not t._rg:
            raise RuntimeError("element 0 of tensors does not require grad and does not have a grad_fn")
        if t._tape is not tape:
            refuse("backward() from a tensor computed outside the function",
                   "only the traced graph can be replayed.")
        if g is None:
            seed = None
            if t._numel != 1:
                raise RuntimeError("grad can be implicitly created only for scalar outputs")
            value = engine.seed_value(t, None)
        elif isinstance(g, Tensor) and g._tape is tape:
            if g._shape != t._shape:
                engine.seed_value(t, g.detach().numpy())   # torch's shape error
            seed = ("slot", g._dtype.arena, g._off)
            tape.flush()
            value = tape.value(g).astype(t._dtype.np).reshape(-1)
        else:
            value = engine.seed_value(t, g)
            seed = ("value", value.copy())
        entries.append((t._dtype.arena, t._off, t._numel, seed))
        seeds.append((t, value))
    only = None if inputs is None else ([inputs] if isinstance(inputs, Tensor) else list(inputs))
    if only is not None and any(t._tape is not None for t in only):
        refuse("backward(inputs=...) with a non-leaf tensor",
               "its .grad would be filled in the middle of the backward sweep, by Python.")
    trace.events.append(("backward", entries, only))
    # The first call's gradients, computed now; leaf hooks are user code outside the trace
    # (replays run them again at delivery), so the trace's checks are off meanwhile.
    saved = state.trace, state.eager
    state.trace, state.eager = None, False
    try:
        engine.run_backward(seeds, bool(retain_graph), targets=only, accumulate=True)
    finally:
        state.trace, state.eager = saved
    trace.backward_done = True
