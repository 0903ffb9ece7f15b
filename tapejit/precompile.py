"""Compiling ahead of a program: ``python -m tapejit warmup`` and the pytest fixture
``tapejit_warm`` (``tapejit/pytest_plugin.py``).

A program's first gradient waits for Numba to compile the sweeps of the ops its tapes use,
once per arena dtype (float64, float32): each op's forward, backward and chunked-backward
sweep over a run of its records is a compile unit of its own (``codegen.units``), compiled
when a sweep first meets the op, and the entry points that Python calls are compiled at
their first call.  ``precompile`` does that work ahead: it loads from the cache, or
compiles, every unit of the chosen op groups for each dtype, and calls every entry point
the library calls from Python once per dtype with empty arrays of the types its callers
pass (nothing runs: no records), which compiles each for the signature a real program
uses, and ``compiled.batch``'s module (``tapejit/replay/rows.py``) when the groups include
any of its ops.  It also compiles tapejit's other cached entry points (graph walks), which
take no dtype.
"""
import time

import numpy as np

DTYPES = (np.float64, np.float32)

# Seconds to compile each step from an empty cache (float64 + float32, one process, on the
# 2-core machine the README's figures come from): steps run longest first, so that parallel
# processes finish together instead of one starting the longest step last.
_STEP_SECONDS = {"batched replay": 90, "decomp": 62, "arith": 52, "elementary": 44, "rnn": 26, "special": 21, "activation": 19,
                 "math": 18, "conv": 17, "reduce": 12, "entry points": 9, "index": 7, "linalg": 5, "sum": 5,
                 "norm": 5, "copy": 4}


def _arena_args(dt):
    """Empty buffers of the types the tape passes: records (int64 rows of six), the arena's
    values and adjoints, flags, freed marks, ints and floats (two leading zeros, which the
    sweeps read as their unused constants)."""
    rec = np.zeros((1, 6), np.int64)
    return dict(rec=rec, v=np.zeros(1, dt), g=np.zeros(1, dt), flags=np.zeros(1, np.uint8),
                freed=np.zeros(1, np.uint8), ints=np.zeros(1, np.int64), floats=np.zeros(2, dt))


def _sweep_calls(dt):
    """``[(entry point, arguments)]``: each entry point called as tapejit calls it (tape.py,
    engine.py, executor.py, replay/), over zero records, with the table of compiled op sweeps
    of the arena of dtype ``dt``."""
    from tapejit import tape
    a = _arena_args(dt)
    rec, v, g, flags, freed, ints, floats = (a[k] for k in ("rec", "v", "g", "flags", "freed", "ints", "floats"))
    table = tape.sweeps().table(_arena(dt))
    chunks = np.repeat(rec[None, :0, :], 1, axis=0)          # executor.py: one copy of a run per chunk
    freeds = np.repeat(freed[None, :0], 1, axis=0)
    status = np.empty(1, np.int64)
    seed_at = np.zeros((0, 2), np.int64)                      # replay/frozen.py: no seeds
    seed_vals = np.zeros(0, dt)
    load_outs = np.zeros(0, np.int64)
    at3 = np.zeros((0, 3), np.int64)                          # replay/batch.py: no rows
    rows = np.zeros((0, 1), dt)
    return [
        ("forward", (rec, 0, 0, v, ints, floats, table)),
        ("backward", (rec, 0, 0, v, g, flags, freed, ints, floats, False, table)),
        ("backward_elementwise", (rec, 0, 0, v, g, flags, freed, ints, floats, False, table)),
        ("forward_chunks", (chunks, 0, 0, v, ints, floats, table)),
        ("backward_chunks", (chunks, 0, 0, v, g, flags, freeds, ints, floats, False, status, table)),
        ("replay", (rec, 0, v, g, flags, freed, ints, floats, seed_at, seed_vals, load_outs, table)),
        ("replay_inline", (rec, 0, v, g, flags, freed, ints, floats, seed_at, seed_vals, load_outs, table)),
        ("replay_batch", (rec, 0, v.copy(), ints, floats, seed_at, seed_vals, load_outs, at3, rows, at3,
                          rows.copy(), at3, rows.copy(), 1, table)),
    ]


def _arena(dt):
    from tapejit import tape
    return [np.dtype(t) for t in tape._ARENA_DTYPES].index(np.dtype(dt))


def _entry_points(dt):
    from tapejit import tape
    sw = tape.sweeps()
    for entry, args in _sweep_calls(dt):
        getattr(sw, entry)(*args)


def _op_sweeps(group, dt):
    from tapejit import codegen, tape
    tape.sweeps()
    codegen.load_units(_arena(dt), [group])


def _graph_walks():
    """tapejit's cached entry points outside the generated sweeps, called as their callers
    call them (``tape._independent_halves``, ``dependencies.dependencies``)."""
    from tapejit import registry, tape
    from tapejit.ops.core import CAST
    from tapejit import dependencies as _graph
    rec = np.zeros((1, 6), np.int64)[:0]
    none = np.flatnonzero(rec[:, 0] == 1)
    load, cast = registry.BY_NAME["load"].opcode, CAST.opcode
    tape._earliest_reached(rec, 0, 0, load, cast, none, rec[none, 1], none, rec[none, 1])
    listed_at, listed = _graph.listed_operands(rec, np.zeros(1, np.int64))
    _graph.mark_dependencies(rec, 0, listed_at, listed, load, cast, np.zeros(1, np.uint8),
                             np.zeros(1, np.uint8), True)
    _graph.prune_fields(rec.copy(), 0, listed_at, listed, np.zeros(0, np.uint8), load, cast,
                        np.zeros(1, np.uint8), np.zeros(1, np.uint8))


def steps(groups=None, dtypes=DTYPES):
    """``[(label, function)]``: the work of ``precompile``, the longest steps first (so that
    parallel processes finish together)."""
    from tapejit import registry
    from tapejit.replay import rows
    groups = list(registry.GROUPS) if groups is None else list(groups)
    unknown = [g for g in groups if g not in registry.GROUPS]
    if unknown:
        raise ValueError(f"unknown op group(s) {', '.join(unknown)}; the groups are {', '.join(registry.GROUPS)}")
    dtypes = [np.dtype(d) for d in dtypes]
    if not groups or not dtypes or any(d not in map(np.dtype, DTYPES) for d in dtypes):
        raise ValueError(f"precompile needs op groups and float dtypes (float64, float32), got {groups}, "
                         f"{[str(d) for d in dtypes]}")
    work = []
    for group in groups:
        for dt in dtypes:
            work.append((group, f"op group {group} ({dt.name})", lambda group=group, dt=dt: _op_sweeps(group, dt)))
    for dt in dtypes:
        work.append(("entry points", f"entry points ({dt.name})", lambda dt=dt: _entry_points(dt)))
        if set(groups) & set(rows.ROW_GROUPS):
            work.append(("batched replay", f"batched replay by rows ({dt.name})", lambda dt=dt: rows.warm(dt)))
    work.sort(key=lambda step: -_STEP_SECONDS.get(step[0], 10))     # a stable sort: float64 first
    work = [(label, run) for _, label, run in work]
    work.append(("graph walks (tj.compile, tape retirement)", _graph_walks))
    return work


def _run_step(groups, dtypes, index):
    """Run step ``index`` of ``steps(groups, dtypes)`` in a worker process; its seconds."""
    start = time.perf_counter()
    steps(groups, dtypes)[index][1]()
    return time.perf_counter() - start


def _parallel(work, groups, dtypes, jobs, progress, start):
    """Run ``work``'s steps in ``jobs`` processes.  Each step compiles one entry point for
    one dtype: a Numba function of its own, cached in its own file, so processes compiling
    different steps never write the same cache entry; Numba compiles on one core, and this
    is what uses the others.  The steps are handed out one at a time, so a process that
    finishes a short step takes the next."""
    import concurrent.futures
    import multiprocessing
    context = multiprocessing.get_context("spawn")   # a fork would copy Numba's state mid-use
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context) as pool:
        pending = {pool.submit(_run_step, groups, dtypes, i): label for i, (label, _) in enumerate(work)}
        done = 0
        for future in concurrent.futures.as_completed(pending):
            future.result()
            done += 1
            if progress is not None:
                progress(done, len(work), pending[future], time.perf_counter() - start)


def precompile(groups=None, dtypes=DTYPES, progress=None, jobs=1):
    """Compile ahead, or load from tapejit's cache, what a program whose tapes use op groups
    ``groups`` (names from ``registry.GROUPS``; every group if None) runs for arenas of
    ``dtypes``.  ``progress(done, total, label, elapsed)`` is called before each step
    (``done`` steps finished; with ``jobs`` > 1, as each step ends instead) and once at the
    end (``label`` None).  With ``jobs`` > 1 the
    steps compile in that many processes at once, into the cache only: this process loads
    nothing (a later process, or a later call with ``jobs=1``, loads them in about a second).
    Returns the elapsed seconds."""
    work = steps(groups, dtypes)
    start = time.perf_counter()
    if jobs > 1 and len(work) > 1:
        if progress is not None:
            progress(0, len(work), f"{len(work)} steps in {jobs} processes", 0.0)
        _parallel(work, groups, dtypes, jobs, progress, start)
    else:
        for i, (label, run) in enumerate(work):
            if progress is not None:
                progress(i, len(work), label, time.perf_counter() - start)
            run()
    elapsed = time.perf_counter() - start
    if progress is not None:
        progress(len(work), len(work), None, elapsed)
    return elapsed
