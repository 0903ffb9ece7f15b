"""Compiling ahead of a program: ``python -m tapejit warmup`` and the pytest fixture
``tapejit_warm`` (``tapejit/pytest_plugin.py``).

A program's first gradient waits for Numba to compile the sweeps of the op groups its tapes
use, once per arena dtype (float64, float32): Numba compiles a function for each new set of
argument types, and the arena's dtype is one of them.  ``precompile`` does that work ahead:
it loads the sweeps for the chosen groups (``tape.sweeps``: generated and compiled if not in
the cache, else loaded from it) and calls every entry point the library calls from Python
once per dtype, with empty arrays of the types its callers pass (nothing runs: no records),
which compiles each for the signature a real program uses and saves it in the cache.  It
also compiles tapejit's other cached entry points (graph walks), which take no dtype.

The sweeps are compiled per compile unit: today one generated module for the set of groups
asked for (``codegen.load_sweeps``), which is what a process that uses those groups loads;
``TAPEJIT_SWEEP_GROUPS=all`` makes every process start with the unit for all groups.
"""
import time

import numpy as np

DTYPES = (np.float64, np.float32)


def _arena_args(dt):
    """Empty buffers of the types the tape passes: records (int64 rows of six), the arena's
    values and adjoints, flags, freed marks, ints and floats (two leading zeros, which the
    sweeps read as their unused constants)."""
    rec = np.zeros((1, 6), np.int64)
    return dict(rec=rec, v=np.zeros(1, dt), g=np.zeros(1, dt), flags=np.zeros(1, np.uint8),
                freed=np.zeros(1, np.uint8), ints=np.zeros(1, np.int64), floats=np.zeros(2, dt))


def _sweep_calls(dt):
    """``[(entry point, arguments)]``: each generated entry point called as tapejit calls it
    (tape.py, engine.py, chunked.py, replay/), over zero records."""
    a = _arena_args(dt)
    rec, v, g, flags, freed, ints, floats = (a[k] for k in ("rec", "v", "g", "flags", "freed", "ints", "floats"))
    chunks = np.repeat(rec[None, :0, :], 1, axis=0)          # chunked.py: one copy of a run per chunk
    freeds = np.repeat(freed[None, :0], 1, axis=0)
    status = np.empty(1, np.int64)
    seed_at = np.zeros((0, 2), np.int64)                      # replay/frozen.py: no seeds
    seed_vals = np.zeros(0, dt)
    load_outs = np.zeros(0, np.int64)
    at3 = np.zeros((0, 3), np.int64)                          # replay/batch.py: no rows
    rows = np.zeros((0, 1), dt)
    return [
        ("forward", (rec, 0, 0, v, ints, floats)),
        ("backward", (rec, 0, 0, v, g, flags, freed, ints, floats, False)),
        ("forward_chunks", (chunks, 0, 0, v, ints, floats)),
        ("backward_chunks", (chunks, 0, 0, v, g, flags, freeds, ints, floats, False, status)),
        ("replay", (rec, 0, v, g, flags, freed, ints, floats, seed_at, seed_vals, load_outs)),
        ("replay_batch", (rec, 0, v.copy(), ints, floats, seed_at, seed_vals, load_outs, at3, rows, at3,
                          rows.copy(), at3, rows.copy(), 1)),
    ]


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


def compile_units(groups):
    """The masks of op groups that are compiled as one unit, covering ``groups``."""
    from tapejit import codegen
    return [codegen.group_mask(groups)]


def steps(groups=None, dtypes=DTYPES):
    """``[(label, function)]``: the work of ``precompile``, in order."""
    from tapejit import codegen, registry, tape
    groups = list(registry.GROUPS) if groups is None else list(groups)
    unknown = [g for g in groups if g not in registry.GROUPS]
    if unknown:
        raise ValueError(f"unknown op group(s) {', '.join(unknown)}; the groups are {', '.join(registry.GROUPS)}")
    dtypes = [np.dtype(d) for d in dtypes]
    if not groups or not dtypes or any(d not in map(np.dtype, DTYPES) for d in dtypes):
        raise ValueError(f"precompile needs op groups and float dtypes (float64, float32), got {groups}, "
                         f"{[str(d) for d in dtypes]}")
    work = []
    for mask in compile_units(groups):
        names = ", ".join(codegen.groups_in(mask))
        for dt in dtypes:
            for entry, args in _sweep_calls(dt):
                work.append((f"{entry} for op groups {names} ({dt.name})",
                             lambda mask=mask, entry=entry, args=args: getattr(tape.sweeps(mask), entry)(*args)))
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
