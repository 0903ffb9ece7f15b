"""``tapejit.autograd.profiler``: per-op CPU time, as torch's autograd profiler reports it.

``with profile() as prof: ...`` times every tapejit op the block calls: the functions of
``tapejit``, ``tapejit.nn.functional``, ``tapejit.linalg`` and ``tapejit.special``, the
tensor methods and operators, ``backward()`` (one row: tapejit's backward is one compiled
sweep, not one node per op as torch's) and optimizer steps.  ``record_function(name)``
adds a row for a block of user code.  ``prof.key_averages().table(sort_by=...)`` prints
torch's table: self and total CPU time, their percentages, the average and the count.

It costs nothing when no profiler runs: entering the first profiler puts timing wrappers
in place of those functions (in every tapejit module that refers to them, and on
``Tensor``) and leaving the last one puts the originals back; no check runs on the
recording paths otherwise.  A reference taken before the profiler started
(``relu = tj.relu`` at import time) calls the original and is not timed.

An op's time is wall time on the calling thread, including the compiled forward sweep
when reading a value forces it (tapejit computes a tape lazily, so most forward work is
timed where a value is first read, not where each op is recorded).
"""
import contextlib
import itertools
import json
import sys
import threading
import time
import types

from tapejit import api, linalg, special
from tapejit.tensor import Tensor

_active = []           # the running profilers, innermost last
_patches = []          # (owner, name, original) to restore when the last one stops
_ABSENT = object()
_ids = itertools.count()
_local = threading.local()
_lock = threading.Lock()
_now = time.perf_counter_ns


def _thread_state():
    """This thread's open events (innermost last) and its id."""
    state = getattr(_local, "state", None)
    if state is None:
        state = _local.state = ([], threading.get_ident())
    return state


def _shapes(args, kwargs):
    return [list(a._shape) if isinstance(a, Tensor) else [] for a in itertools.chain(args, kwargs.values())]


# An open event is a list: [id, name, start ns, time of the events inside it, parent id, shapes].
# A closed one is a tuple of numbers, strings and None (shapes: None unless recorded), which the
# garbage collector stops tracking: a long profile stays cheap to collect.
_SHAPES = [False]   # whether a running profiler records input shapes


def _open(name, args=(), kwargs=None):
    stack = _thread_state()[0]
    shapes = _shapes(args, kwargs or {}) if _SHAPES[0] else None
    frame = [next(_ids), name, 0, 0, stack[-1][0] if stack else None, shapes]
    stack.append(frame)
    frame[2] = _now()
    return frame


def _close(frame):
    end = _now()
    stack, thread = _thread_state()
    if not stack or stack[-1] is not frame:
        return   # opened under a profiler that has stopped, or closed out of order: dropped
    stack.pop()
    id_, name, start, inside, parent, shapes = frame
    total = end - start
    if stack:
        stack[-1][3] += total
    event = (id_, name, start, end, total - inside, parent, thread, shapes)
    for prof in _active:
        if prof._started <= start:
            prof._raw.append(event)


def _timed(name, fn):
    """``fn`` recording one event named ``name`` (or ``name(self)``) per call."""
    named = callable(name)

    def timed(*args, **kwargs):
        if not _active:
            return fn(*args, **kwargs)
        # _open and _close, inline: this runs once per op while profiling
        state = getattr(_local, "state", None) or _thread_state()
        stack = state[0]
        frame = [next(_ids), name(args[0]) if named else name, 0, 0, stack[-1][0] if stack else None,
                 _shapes(args, kwargs) if _SHAPES[0] else None]
        stack.append(frame)
        frame[2] = start = _now()
        try:
            return fn(*args, **kwargs)
        finally:
            end = _now()
            if stack and stack[-1] is frame:
                stack.pop()
                total = end - start
                if stack:
                    stack[-1][3] += total
                event = (frame[0], frame[1], start, end, total - frame[3], frame[4], state[1], frame[5])
                for prof in _active:
                    if prof._started <= start:
                        prof._raw.append(event)
    timed.__name__ = getattr(fn, "__name__", "timed")
    timed.__qualname__ = getattr(fn, "__qualname__", timed.__name__)
    timed.__doc__ = fn.__doc__
    timed.__wrapped__ = fn
    timed._profiled = True
    timed._name = name
    return timed


# ---- what is timed --------------------------------------------------------------------------

_OPERATORS = {"add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and", "or", "xor",
              "lshift", "rshift"}
_NOT_OPS = {"manual_seed", "compile", "save", "load", "numel", "grad", "value_and_grad", "tensor_repr"}


def _dunder_name(dunder):
    """``__iadd__`` -> ``add_``, ``__radd__`` -> ``add``, ``__neg__`` -> ``neg``, as torch's rows
    name the op an operator runs (``truediv`` -> ``div``)."""
    base = dunder.strip("_")
    if base[:1] == "i" and base[1:] in _OPERATORS:
        base = base[1:] + "_"
    elif base[:1] == "r" and base[1:] in _OPERATORS:
        base = base[1:]
    return base.replace("truediv", "div")


def _is_op(name, fn):
    return (isinstance(fn, types.FunctionType) and not name.startswith("_") and name not in _NOT_OPS
            and not name.startswith(("set_", "get_", "is_")) and fn.__module__.startswith("tapejit")
            and not getattr(fn, "_profiled", False))


# The namespaces and classes above autograd whose functions a profile times (the facade,
# nn.functional, optimizers): they hand themselves over at import, as autograd imports
# nothing above it.
_timed_modules = []
_timed_classes = []


def time_functions_of(module):
    """Have a profile time ``module``'s public functions."""
    _timed_modules.append(module)


def time_methods_of(base, methods):
    """Have a profile time ``methods`` of ``base`` and of its subclasses, in rows named as
    torch's optimizer rows (``Optimizer.step#SGD.step``)."""
    _timed_classes.append((base, methods))


def _targets():
    """(owner, attribute, event name) of every timed function."""
    found = []
    for public, fn, meth, dunders in api.EXPORTS:
        if meth is not None:
            found.append((Tensor, meth, meth))
        for d in dunders:
            found.append((Tensor, d, _dunder_name(d)))
    for name in ("backward", "to", "type", "type_as", "detach", "item", "tolist", "float", "double",
                 "long", "unsqueeze_", "squeeze_", "t_", "transpose_", "swapdims_", "swapaxes_", "normal_",
                 "uniform_"):
        if isinstance(Tensor.__dict__.get(name), types.FunctionType):
            found.append((Tensor, name, name))
    for module in (*_timed_modules, linalg, special):
        # linalg and special import recording helpers (record, on_tape...) by name: their
        # __all__ says which are theirs
        public = getattr(module, "__all__", None) if module in (linalg, special) else None
        for name, fn in list(vars(module).items()):
            if (public is None or name in public) and _is_op(name, fn):
                found.append((module, name, name))
    for base, methods in _timed_classes:
        classes = [base]
        while classes:
            cls = classes.pop()
            classes.extend(cls.__subclasses__())
            for method in methods:
                if isinstance(cls.__dict__.get(method), types.FunctionType):
                    found.append((cls, method, lambda self, m=method, b=base.__name__:
                                  f"{b}.{m}#{type(self).__name__}.{m}"))
    return found


def _patch():
    """Put timing wrappers in place of every target, wherever a tapejit module holds it."""
    wrappers = {}
    for owner, attr, name in _targets():
        original = owner.__dict__.get(attr, _ABSENT) if isinstance(owner, type) else vars(owner).get(attr, _ABSENT)
        if original is _ABSENT or getattr(original, "_profiled", False):
            continue
        wrapped = wrappers.get(id(original))
        if wrapped is None:
            wrapped = wrappers[id(original)] = (original, _timed(name, original))
        _patches.append((owner, attr, original))
        setattr(owner, attr, wrapped[1])
    # Modules that imported a function by name (``from tapejit.ops.linalg import linear``)
    # call it through their own globals: rebind those too, and the raw functions behind
    # the front ends (``api.EXPORTS``), which op modules call directly.
    for public, fn, meth, dunders in api.EXPORTS:
        if id(fn) not in wrappers and public is not None and _is_op(public, fn):
            wrappers[id(fn)] = (fn, _timed(public, fn))
    for original, wrapper in list(wrappers.values()):
        inner = getattr(original, "__wrapped__", None)   # a front end's checked function
        if isinstance(inner, types.FunctionType) and id(inner) not in wrappers \
                and inner.__name__ == original.__name__ and inner.__module__.startswith("tapejit"):
            wrappers[id(inner)] = (inner, _timed(wrapper._name, inner))
    # ... and ``api.front_ends``, through which modules below the facade call ``tj.<name>``
    owners = [module for module_name, module in list(sys.modules.items())
              if module is not None and (module_name == "tapejit" or module_name.startswith("tapejit."))
              and module_name != __name__]
    for module in owners + [api.front_ends]:
        namespace = vars(module)
        for attr, value in list(namespace.items()):
            entry = wrappers.get(id(value))
            if entry is not None and entry[0] is value and not attr.startswith("__"):
                _patches.append((module, attr, value))
                namespace[attr] = entry[1]


def _unpatch():
    while _patches:
        owner, attr, original = _patches.pop()
        setattr(owner, attr, original)


# ---- events and their table -----------------------------------------------------------------

class Interval:
    __slots__ = ("start", "end")

    def __init__(self, start, end):
        self.start = start
        self.end = end

    def elapsed_us(self):
        return self.end - self.start


class FunctionEvent:
    """One timed call (times in microseconds, as torch)."""

    def __init__(self, id, name, start_us, end_us, self_us, thread, input_shapes):
        self.id = id
        self.name = self.key = name
        self.time_range = Interval(start_us, end_us)
        self.thread = thread
        self.input_shapes = input_shapes
        self.cpu_parent = None
        self.cpu_children = []
        self.count = 1
        self.self_cpu_time_total = self_us
        self.cuda_time_total = self.device_time_total = self.self_cuda_time_total = 0.0
        self.self_device_time_total = 0.0

    @property
    def cpu_time_total(self):
        return self.time_range.elapsed_us()

    cpu_time = cpu_time_total

    def __repr__(self):
        return (f"<FunctionEvent id={self.id} name={self.name} cpu_time={_format_time(self.cpu_time_total)} "
                f"start_us={self.time_range.start:.3f} end_us={self.time_range.end:.3f} "
                f"cpu_children={[c.id for c in self.cpu_children]} input_shapes={self.input_shapes}>")


class FunctionEventAvg:
    """The events of one name (and input shapes, if grouped by them), summed."""

    def __init__(self, key, input_shapes=None):
        self.key = key
        self.input_shapes = input_shapes
        self.count = 0
        self.cpu_time_total = 0.0
        self.self_cpu_time_total = 0.0
        self.cpu_parent = None
        self.cuda_time_total = self.device_time_total = self.self_cuda_time_total = 0.0
        self.self_device_time_total = 0.0

    def add(self, event):
        if self.count == 0:
            self.cpu_parent = event.cpu_parent
        self.count += event.count
        self.cpu_time_total += event.cpu_time_total
        self.self_cpu_time_total += event.self_cpu_time_total
        return self

    @property
    def cpu_time(self):
        return self.cpu_time_total / self.count if self.count else 0.0

    def __repr__(self):
        return (f"<FunctionEventAvg key={self.key} self_cpu_time={_format_time(self.self_cpu_time_total)} "
                f"cpu_time={_format_time(self.cpu_time)} count={self.count} input_shapes={self.input_shapes}>")


def _format_time(us):
    if us >= 1e6:
        return f"{us / 1e6:.3f}s"
    if us >= 1e3:
        return f"{us / 1e3:.3f}ms"
    return f"{us:.3f}us"


class EventList(list):
    """A list of events with torch's summaries."""

    def __init__(self, events=(), shapes_column=False):
        super().__init__(events)
        self._shapes_column = shapes_column

    @property
    def self_cpu_time_total(self):
        return sum(e.self_cpu_time_total for e in self)

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        averages = {}
        for event in self:
            key = (event.key, str(event.input_shapes)) if group_by_input_shape else event.key
            avg = averages.get(key)
            if avg is None:
                avg = averages[key] = FunctionEventAvg(
                    event.key, event.input_shapes if group_by_input_shape else None)
            avg.add(event)
        return EventList(averages.values(), shapes_column=group_by_input_shape)

    def total_average(self):
        total = FunctionEventAvg("Total")
        for event in self:
            total.add(event)
        return total

    def table(self, sort_by=None, row_limit=100, max_src_column_width=75, max_name_column_width=55,
              max_shapes_column_width=80, header=None, top_level_events_only=False, time_unit=None):
        """torch's table: one row per event (per name, for ``key_averages()``), sorted by
        the attribute ``sort_by`` (``"cpu_time_total"``, ``"self_cpu_time_total"``,
        ``"count"``, ...) in decreasing order."""
        events = list(self)
        if top_level_events_only:
            events = [e for e in events if e.cpu_parent is None]
        if sort_by is not None:
            events.sort(key=lambda e: getattr(e, sort_by), reverse=True)
        # the name column fits every event's name, shown or not, as torch's
        name_width = min(max([len(e.key) for e in events] + [4]) + 4, max_name_column_width)
        if row_limit is not None and row_limit > 0:
            events = events[:row_limit]
        self_total = self.self_cpu_time_total
        columns = [("Name", name_width)] + [(title, 12) for title in (
            "Self CPU %", "Self CPU", "CPU total %", "CPU total", "CPU time avg", "# of Calls")]
        shapes_width = 0
        if self._shapes_column:
            shapes_width = min(max([len(str(e.input_shapes)) for e in events] + [12]) + 4,
                               max_shapes_column_width)
            columns.append(("Input Shapes", shapes_width))
        rule = "".join("-" * width + "  " for _, width in columns)

        def fit(text, width):
            return text if len(text) <= width else text[:width - 3] + "..."

        def pct(us):
            return f"{100.0 * us / self_total:.2f}%" if self_total else "0.00%"

        def unit(us):
            if time_unit == "s":
                return f"{us / 1e6:.3f}s"
            if time_unit == "ms":
                return f"{us / 1e3:.3f}ms"
            if time_unit == "us":
                return f"{us:.3f}us"
            return _format_time(us)

        lines = []
        if header is not None:
            lines += ["=" * len(rule), header]
        lines += [rule, "".join(f"{title:>{width}}  " for title, width in columns), rule]
        for e in events:
            cells = [fit(e.key, name_width), pct(e.self_cpu_time_total), unit(e.self_cpu_time_total),
                     pct(e.cpu_time_total), unit(e.cpu_time_total), unit(e.cpu_time), str(e.count)]
            if self._shapes_column:
                cells.append(fit(str(e.input_shapes), shapes_width))
            lines.append("".join(f"{cell:>{width}}  " for cell, (_, width) in zip(cells, columns)))
        lines += [rule, f"Self CPU time total: {unit(self_total)}", ""]
        return "\n".join(lines)

    def export_chrome_trace(self, path):
        """The events as a Chrome trace (``chrome://tracing``, Perfetto)."""
        trace = [{"name": e.name, "ph": "X", "ts": e.time_range.start, "dur": e.cpu_time_total,
                  "pid": 0, "tid": e.thread, "cat": "cpu_op",
                  "args": {"Input Dims": e.input_shapes} if e.input_shapes else {}}
                 for e in self if isinstance(e, FunctionEvent)]
        with open(path, "w") as f:
            json.dump({"traceEvents": trace}, f)

    def __str__(self):
        return self.table()


# ---- the context managers -------------------------------------------------------------------

class profile:
    """``with profile() as prof:`` times the tapejit ops run inside; then
    ``prof.key_averages().table(sort_by="self_cpu_time_total")``.  Only the CPU is
    profiled (``use_cuda=True`` is refused as on a CPU-only torch build); ``record_shapes``
    adds each op's input shapes (``key_averages(group_by_input_shape=True)``)."""

    def __init__(self, enabled=True, *, use_cuda=False, use_device=None, record_shapes=False,
                 with_flops=False, profile_memory=False, with_stack=False, with_modules=False,
                 use_kineto=False, use_cpu=True, **kwargs):
        if use_cuda or (use_device not in (None, "cpu")):
            raise AssertionError("Torch not compiled with CUDA enabled")
        self.enabled = enabled
        self.record_shapes = record_shapes
        self.function_events = None
        self._raw = []
        self._started = None
        self._entered = False

    def __enter__(self):
        if not self.enabled:
            return self
        if self._entered:
            raise RuntimeError("Profiler context manager is not reentrant")
        self._entered = True
        with _lock:
            if not _active:
                _patch()
            self._started = _now()
            _active.append(self)
            _SHAPES[0] = any(p.record_shapes for p in _active)
        return self

    def __exit__(self, *exc):
        if not self.enabled:
            return False
        with _lock:
            _active.remove(self)
            _SHAPES[0] = any(p.record_shapes for p in _active)
            if not _active:
                _unpatch()
        self.function_events = self._events()
        return False

    def _events(self):
        """The raw records as events, in start order, times in microseconds from the start."""
        origin = self._started
        by_id = {}
        events = []
        for id_, name, start, end, self_ns, parent, thread, shapes in sorted(self._raw, key=lambda r: r[2]):
            event = FunctionEvent(id_, name, (start - origin) / 1e3, (end - origin) / 1e3, self_ns / 1e3,
                                  thread, shapes if shapes is not None else [])
            by_id[id_] = event
            events.append(event)
        for (id_, _, _, _, _, parent, _, _) in self._raw:
            if parent in by_id:
                child = by_id[id_]
                child.cpu_parent = by_id[parent]
                by_id[parent].cpu_children.append(child)
        self._raw = []
        return EventList(events, shapes_column=self.record_shapes)

    def _finished(self):
        if self.function_events is None:   # not run yet, or running: nothing yet, as torch
            return EventList(shapes_column=self.record_shapes)
        return self.function_events

    def events(self):
        return self._finished()

    def key_averages(self, group_by_input_shape=False, group_by_stack_n=0):
        return self._finished().key_averages(group_by_input_shape, group_by_stack_n)

    def total_average(self):
        return self._finished().total_average()

    def table(self, *args, **kwargs):
        return self._finished().table(*args, **kwargs)

    def export_chrome_trace(self, path):
        return self._finished().export_chrome_trace(path)

    @property
    def self_cpu_time_total(self):
        return self._finished().self_cpu_time_total

    def __str__(self):
        return str(self._finished())


class record_function(contextlib.ContextDecorator):
    """A row named ``name`` for the code inside (``with record_function("forward"):`` or as
    a decorator); nothing when no profiler runs."""

    def __init__(self, name, args=None):
        self.name = name
        self.args = args
        self._frames = []

    def __enter__(self):
        self._frames.append(_open(self.name) if _active else None)
        return self

    def __exit__(self, *exc):
        frame = self._frames.pop()
        if frame is not None and _active:
            _close(frame)
        return False
