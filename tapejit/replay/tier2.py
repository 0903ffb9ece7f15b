"""Replay tier 2: compiling a trace's fused function without making its caller wait.

``attach(frozen, mode)`` runs when a trace is frozen.  It asks ``fused.py`` for the
trace's source; a trace it cannot fuse stays on tier 1 (``Tier2.state == "ineligible"``,
with the reason).  The source is saved in the cache folder, ``tier2/t2_<key>.py``, where
``key`` hashes its text (so the trace's structure, the registry hash and the dtype), and
Numba caches what it compiles from it in ``tier2/__pycache__`` beside it; a file
``t2_<key>.ok`` there says the compiled entry points are in that cache (for this Numba
version and CPU).

``mode=True`` (the default): a separate process, ``python -m tapejit.replay.tier2
<file> <dtype>``, compiles it at a low priority and writes Numba's cache; a thread of the
caller's waits for it and loads the compiled functions (a cache load, no compile).  Until
then every replay runs tier 1, and the replay after the load runs tier 2: the caller polls
nothing, it reads one attribute (``Frozen.tier2_call``) per replay.  A second process
finds ``t2_<key>.ok`` and loads tier 2 at its first replay (in the background thread too).
Processes that miss the cache for one key at once compile it once: each writes, compiles
and loads it holding the lock file ``t2_<key>.lock`` (``cache_lock``), so the later ones
find the marker and only load.
``mode="sync"`` compiles in the calling thread before the first replay (tests);
``mode=False`` keeps tier 1.  ``TAPEJIT_TIER2`` (``off``, ``sync``) sets the default.

Never slower: with ``mode=True``, once tier 2 is loaded the trace's next calls run tier 2
and tier 1 in turn, timed whole (``Trial``, from ``Compiled.__call__``), and the faster
tier stays; ``stats()["decision"]`` says which and both times.  ``mode="sync"`` runs
tier 2 without a trial, so tests always exercise it.

``compiled.batch`` has a tier 2 of its own (``fused.generate_rows``), started the same way
at a trace's first batch (``run_rows``) and run, once ready, in blocks of rows on
``tj.get_num_threads()`` threads.
"""
import contextlib
import functools
import hashlib
import importlib.util
import os
import subprocess
import sys
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

import numpy as np

from tapejit import _numba_load, executor
from tapejit.replay import fused

_ENV = "TAPEJIT_TIER2"
#: from this many argument and gradient elements on, tier 2 reads arguments and writes
#: their gradients in place (``Call``); below, through the arena
DIRECT_ELEMENTS = 1 << 15
_jobs = {}                   # key -> _Job: one compile per key and process
_jobs_lock = threading.Lock()
_pool = [None, 0]            # a ThreadPoolExecutor for the threaded loop, and its workers
_queue = []                  # (job, source, dtype) waiting for the background worker
_worker = [False]            # whether the worker thread is running


def _forked():
    """A forked child has none of the parent's threads: no worker, no thread pool, and the
    parent's compiles in progress never finish here (their traces stay on tier 1)."""
    global _jobs_lock, _rows_lock
    _jobs_lock = threading.Lock()     # a parent's thread may have held it at the fork
    _rows_lock = threading.Lock()
    _worker[0] = False
    _queue.clear()
    _jobs.clear()
    _pool[:] = [None, 0]


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forked)


def default_mode():
    """``TAPEJIT_TIER2``: ``off``/``0`` keeps tier 1, ``sync`` compiles before the first replay."""
    value = os.environ.get(_ENV, "").strip().lower()
    if value in ("0", "off", "false", "no"):
        return False
    if value == "sync":
        return "sync"
    return True


def check_mode(mode):
    if mode not in (True, False, "sync"):
        raise ValueError(f"tj.compile: tier2 must be True, False or 'sync', got {mode!r}")
    return mode


#: Timed calls of each tier in a trial after its first call on that tier (a warm-up, not
#: counted); the medians decide.
TRIAL_CALLS = 3
#: A trial whose trace is not called while this many other calls of its function are
#: timed ends with what it has measured (tier 2 stays if it has too few).
TRIAL_PATIENCE = 64
_clock = time.perf_counter    # tests inject their timings here
_NO_TRIALS = {}


class _Compile:
    """The state of one generated function's compile (tier 2's of a trace, or its batch
    rows'), as ``stats()`` reports it."""
    __slots__ = ("state", "reason", "key", "seconds", "cached")

    def __init__(self, state, reason=None):
        self.state = state       # off | ineligible | compiling | ready | failed
        self.reason = reason
        self.key = None
        self.seconds = None      # from the start of its compile (or cache load) to loaded
        self.cached = None       # whether it was loaded from the disk cache, with no compile

    def stats(self):
        return {"state": self.state, "reason": self.reason, "compile_seconds": self.seconds,
                "from_cache": self.cached}

    def failed(self, reason):
        self.state = "failed"
        self.reason = reason


class Tier2(_Compile):
    """Tier 2's state for one frozen trace (``stats()`` reports it)."""
    __slots__ = ("plan", "frozen", "trials", "decision", "__weakref__")

    def __init__(self, state, reason=None):
        super().__init__(state, reason)
        self.plan = None
        self.frozen = None
        self.trials = None       # the compiled function's pending trials (``Trial``), or None: no trial
        self.decision = None     # "measuring", "kept (...)", "dropped: slower (...)", or why not measured

    def stats(self):
        return {**super().stats(), "decision": self.decision}

    def ready(self, module, seconds, cached):
        """The compiled functions are loaded: later replays of ``frozen`` run them (after a
        trial against tier 1, see ``Trial``, unless compiled with ``mode="sync"``)."""
        frozen = self.frozen
        self.seconds = seconds
        self.cached = cached
        if frozen is None:
            return
        self.frozen = None       # the trace keeps this object, not the reverse
        call = Call(module, self.plan, frozen)
        trials, self.trials = self.trials, None
        if trials is None:
            self.decision = "not measured (tier2='sync': no trial)"
        else:
            self.decision = "measuring"
            trials[id(frozen)] = Trial(self, frozen, call)
        frozen.tier2_call = call
        self.state = "ready"

    def failed(self, reason):
        super().failed(reason)
        self.frozen = None


class _Job:
    """One compile (or cache load) of a generated module, shared by traces of one key."""

    def __init__(self, key):
        self.key = key
        self.module = None
        self.error = None
        self.seconds = None
        self.cached = None
        self.waiting = []
        self.lock = threading.Lock()

    def add(self, tier2):
        with self.lock:
            if self.module is None and self.error is None:
                self.waiting.append(tier2)
                return
        self._tell(tier2)

    def _tell(self, tier2):
        if self.module is not None:
            tier2.ready(self.module, self.seconds, self.cached)
        else:
            tier2.failed(self.error)

    def finish(self, module=None, error=None, seconds=None, cached=None):
        with self.lock:
            self.module, self.error, self.seconds, self.cached = module, error, seconds, cached
            waiting, self.waiting = self.waiting, []
        for tier2 in waiting:
            self._tell(tier2)


class Trial:
    """The calls of a trace after its tier 2 is loaded in the background: tier 2 and tier 1
    in turn (``frozen.tier2_call`` set or None), each call timed whole by ``timed_call``;
    after ``TRIAL_CALLS`` counted calls of each, the tier of the lower median stays and the
    trial ends, so later calls pay nothing for it."""
    __slots__ = ("tier2", "frozen", "call", "times", "turn", "saved_tier", "idle")

    def __init__(self, tier2, frozen, call):
        self.tier2, self.frozen, self.call = tier2, frozen, call
        self.times = {1: [], 2: []}
        self.turn = 2
        self.saved_tier = None
        self.idle = 0

    def before(self):
        """Before a call of the function: this trace's next replay runs the tier of its turn
        (it sets ``last_tier``, so ``after`` knows whether it ran)."""
        frozen = self.frozen
        frozen.tier2_call = self.call if self.turn == 2 else None
        self.saved_tier, frozen.last_tier = frozen.last_tier, None

    def after(self, seconds):
        """After the call (``seconds`` it took, None if it raised); True when decided."""
        frozen = self.frozen
        ran = frozen.last_tier
        if ran is None:    # another trace's call
            frozen.last_tier = self.saved_tier
            self.idle += 1
            return self.idle >= TRIAL_PATIENCE and self.decide()
        if seconds is not None and ran == self.turn:
            self.times[ran].append(seconds)
            self.turn = 3 - ran
        if min(len(self.times[1]), len(self.times[2])) > TRIAL_CALLS:
            return self.decide()
        return False

    def decide(self):
        counted = {tier: sorted(times[1:]) for tier, times in self.times.items()}
        tier2 = self.tier2
        if not counted[1] or not counted[2]:
            self.frozen.tier2_call = self.call
            tier2.decision = "kept (not measured: its trace was not called)"
        else:
            t1, t2 = (float(np.median(counted[tier])) for tier in (1, 2))
            both = f"{t2 * 1e3:.3g} ms vs {t1 * 1e3:.3g} ms on tier 1"
            if t2 > t1:
                self.frozen.tier2_call = None
                tier2.decision = f"dropped: slower ({both})"
            else:
                self.frozen.tier2_call = self.call
                tier2.decision = f"kept ({both})"
        self.frozen = self.call = None
        return True


def timed_call(compiled, trials, args, kwargs):
    """``compiled(*args, **kwargs)`` while ``trials`` (``Compiled._trials``: {id(frozen):
    Trial}) are pending: timed, and told to each trial."""
    compiled._trials = _NO_TRIALS       # the call itself runs as any other
    pending = list(trials.items())
    for _, trial in pending:
        trial.before()
    seconds = None
    try:
        start = _clock()
        result = compiled(*args, **kwargs)
        seconds = _clock() - start
    finally:
        compiled._trials = trials
        for key, trial in pending:
            if trial.after(seconds):
                trials.pop(key, None)
    return result


def attach(frozen, mode, trials=None):
    """Tier 2 for ``frozen`` (see the module docstring); sets ``frozen.tier2``.  ``trials``:
    the compiled function's pending trials, where ``mode=True`` registers the trace's
    (``Trial``) once tier 2 is loaded."""
    if mode is False:
        frozen.tier2 = Tier2("off", "tier2=False")
        return
    try:
        plan, source = fused.generate(frozen)
    except fused.Ineligible as e:
        frozen.tier2 = Tier2("ineligible", str(e))
        return
    tier2 = Tier2("compiling")
    tier2.plan = plan
    tier2.key = fused.key(source)
    tier2.frozen = frozen
    if mode is True:
        tier2.trials = trials
    frozen.tier2 = tier2
    _start(tier2, source, plan.dtype.name, mode)


def _start(waiter, source, dtype, mode):
    """Compile (``mode="sync"``: now, here; else in the background) or load ``source``,
    whose key is ``waiter.key``; ``waiter.ready`` or ``waiter.failed`` is called then."""
    with _jobs_lock:
        job = _jobs.get(waiter.key)
        new = job is None
        if new:
            job = _jobs[waiter.key] = _Job(waiter.key)
    job.add(waiter)
    if not new:
        return
    if mode == "sync":
        _build(job, source, dtype, in_process=True)
        return
    with _jobs_lock:
        _queue.append((job, source, dtype))
        if not _worker[0]:
            _worker[0] = True
            threading.Thread(target=_work, name="tapejit-tier2", daemon=True).start()


def _work():
    """The background worker: one compile at a time, oldest first (a loop tracing many
    signatures must not start a compiling process for each at once)."""
    while True:
        with _jobs_lock:
            if not _queue:
                _worker[0] = False
                return
            job, source, dtype = _queue.pop(0)
        _build(job, source, dtype, in_process=False)


def _folder():
    return _numba_load.private_dir(os.path.join(_numba_load.cache_dir(), "tier2"))


@contextlib.contextmanager
def cache_lock(path):
    """Hold the lock file ``path`` (``flock``, exclusive): processes that missed the cache
    for the same compiled code at once take turns, and the later ones load what the first
    one cached (where there is no ``fcntl``, each compiles).  Also ``rows.py``'s."""
    try:
        import fcntl
        lock = open(path, "ab")
    except (ImportError, OSError):
        lock = None
    try:
        if lock is not None:
            fcntl.flock(lock, fcntl.LOCK_EX)     # released when the file closes, or the process ends
        yield
    finally:
        if lock is not None:
            lock.close()


def _build(job, source, dtype, in_process):
    """Write the module, compile it (here or in a child process) unless the cache has it,
    and load it, holding ``t2_<key>.lock`` (another process compiling it finishes first);
    tells the job's traces."""
    start = time.perf_counter()
    try:
        folder = _folder()
        with cache_lock(os.path.join(folder, f"t2_{job.key}.lock")):
            module, cached = _write_and_load(folder, job.key, source, dtype, in_process)
    except Exception as e:   # tier 1 goes on; stats() says why
        job.finish(error=f"{type(e).__name__}: {e}")
        if in_process:
            raise
        _numba_load.warn_once("tier2 failed", f"tapejit: tj.compile's tier 2 could not compile a trace "
                                              f"({type(e).__name__}: {e}); its replays stay on tier 1.")
        return
    job.finish(module=module, seconds=round(time.perf_counter() - start, 3), cached=cached)


def _write_and_load(folder, key, source, dtype, in_process):
    """``_build``'s work under the lock: ``(module, whether the cache had it)``."""
    _numba_load.private_dir(os.path.join(folder, "__pycache__"))
    path = os.path.join(folder, f"t2_{key}.py")
    marker = path[:-3] + ".ok"
    text = source.encode()
    try:
        with open(path, "rb") as f:
            current = f.read()
    except OSError:
        current = None
    if current != text:
        # a new file, so any marker beside it is stale (its cache is keyed by the file's stamp)
        try:
            os.unlink(marker)
        except OSError:
            pass
        _numba_load.write_atomically(path, text)
    stamp = _machine_stamp()
    try:
        with open(marker, "rb") as f:
            cached = f.read() == stamp
    except OSError:
        cached = False
    if not cached and not in_process:
        _compile_in_child(path, dtype)
    module = _load(path, dtype)
    if not cached:
        _numba_load.write_atomically(marker, stamp)
    return module, cached


def _machine_stamp():
    """What Numba's cached code depends on beyond the file: its version and the CPU it was
    compiled for.  A marker written elsewhere (a cache folder shared by two machines) sends
    the compile to a child process again, never into this process's background thread."""
    import numba
    from llvmlite import binding
    features = hashlib.sha256(binding.get_host_cpu_features().flatten().encode()).hexdigest()[:16]
    return f"numba {numba.__version__} {binding.get_host_cpu_name()} {features}\n".encode()


def _compile_in_child(path, dtype):
    compile_in_child("tapejit.replay.tier2", path, dtype)


def compile_in_child(module, *args):
    """Run ``python -m <module> <args>`` (a compiling process, which calls ``lowest_priority``)
    with this process's tapejit and cache folder, and wait for it; raises with the end of its
    stderr if it fails.  Also ``rows.py``'s, for the row module."""
    package_parent = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(fused.__file__))))
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p])
    env["TAPEJIT_CACHE_DIR"] = _numba_load.cache_dir()
    proc = subprocess.run([sys.executable, "-m", module, *args], env=env,
                          stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    if proc.returncode != 0:
        tail = proc.stderr.decode(errors="replace").strip().splitlines()[-3:]
        raise RuntimeError(f"the compiling process exited with {proc.returncode}: {' | '.join(tail)}")


def _signatures(module, dtype):
    from numba import types
    dt = types.float64 if dtype == "float64" else types.float32
    arr = types.Array(dt, 1, "C")
    wide = types.Array(types.float64, 2, "C")
    if hasattr(module, "rows"):   # compiled.batch's (fused.generate_rows)
        table = types.Array(types.int64, 2, "C")
        block = types.Array(dt, 2, "C")
        return {"rows": (arr, arr, arr, block, table, block, table, block, table, types.int64, types.int64,
                         types.int64)}
    ins = types.UniTuple(arr, module.N_IN) if module.N_IN else types.Tuple(())
    outs = types.UniTuple(arr, module.N_OUT) if module.N_OUT else types.Tuple(())
    run = (arr, arr, types.Array(types.uint8, 1, "C"), arr, types.Array(types.int64, 1, "C"), arr, ins, outs)
    if hasattr(module, "SPLIT"):   # segments and long loops (fused._Writer._split)
        sigs = {f"seg{k}": run + (wide,) for k in range(len(module.SPLIT) + 1)}
        sigs.update((f"part{k}", (arr, arr, arr, ins, outs, types.int64, types.int64, wide, types.int64))
                    for k in range(len(module.SPLIT)))
        return sigs
    sigs = {"run": run}
    if hasattr(module, "part"):
        sigs["prologue"] = (arr, arr, arr, arr, ins, outs)
        sigs["part"] = (arr, arr, arr, ins, outs, types.int64, types.int64, wide, types.int64)
        sigs["epilogue"] = (arr, arr, arr, ins, outs, wide)
    return sigs


def _load(path, dtype):
    """Import the generated module and compile (or load from Numba's cache) its entry points."""
    name = os.path.basename(path)[:-3]
    spec = importlib.util.spec_from_file_location(f"{_numba_load.GENERATED_PACKAGE}.{name}", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    for fn_name, sig in _signatures(module, dtype).items():
        dispatcher = getattr(module, fn_name)
        dispatcher.compile(sig)
        # A call with other argument types must never compile in the caller's thread: the
        # arrays are made to match (Call.inputs), so a mismatch is a bug and raises.
        dispatcher.disable_compile()
    return module


def plain(a, dtype):
    """``a`` flattened as the compiled functions' array type: C-contiguous, writeable,
    aligned, of the arena's dtype (a copy only when it is not already)."""
    if (type(a) is np.ndarray and a.dtype == dtype and a.flags.c_contiguous and a.flags.writeable
            and a.flags.aligned):
        return a.reshape(-1)
    return np.array(a, dtype=dtype).reshape(-1)


class Call:
    """A frozen trace's tier-2 replay: ``fn(ins, outs)`` runs it, reading the arguments
    ``direct_in`` from arrays ``ins`` and writing the gradients ``direct_out`` to ``outs``
    (``arena_outs``: their slots in the adjoint arena, where tier 1 leaves them)."""
    __slots__ = ("fn", "dtype", "direct_in", "copied", "out_of", "arena_ins", "arena_outs", "out_sizes",
                 "small")

    def __init__(self, module, plan, frozen):
        tape = frozen.tape
        d = plan.arena
        if plan.split:
            self.fn = _split(module, (tape.vals[d], tape.adj[d], tape.flags[d], tape.floats[d], tape.ints,
                                      plan.seed_values))
        else:
            fn = functools.partial(module.run, tape.vals[d], tape.adj[d], tape.flags[d], tape.floats[d], tape.ints,
                                   plan.seed_values)
            args = (tape.vals[d], tape.adj[d], tape.floats[d], plan.seed_values)
            self.fn = _threaded(module, plan, args, fn) if plan.threaded else fn
        self.dtype = plan.dtype
        self.direct_in = [arg for _, _, arg in plan.direct_in]
        direct = {off for off, _, _ in plan.direct_in}
        self.copied = [load for load in frozen.arg_loads if load[1] not in direct or load[0] != d]
        self.out_of = {off: k for k, (off, _, _) in enumerate(plan.direct_out)}
        self.arena_ins = tuple(tape.vals[d][off:off + n] for off, n, _ in plan.direct_in)
        self.arena_outs = tuple(tape.adj[d][off:off + n] for off, n, _ in plan.direct_out)
        self.out_sizes = [n for _, n, _ in plan.direct_out]
        # Small arrays go through the arena as on tier 1 (arena_ins, arena_outs): copying them
        # costs less than making the tuples of arrays and the results' arrays per call.
        self.small = sum(n for _, n, _ in plan.direct_in) + sum(self.out_sizes) < DIRECT_ELEMENTS

    def inputs(self, values):
        return tuple([plain(values[arg], self.dtype) for arg in self.direct_in])

    def fresh_outs(self):
        return tuple([np.empty(n, self.dtype) for n in self.out_sizes])


def _threaded(module, plan, args, serial):
    """The replay of a one-group trace whose loop is long: blocks of the loop on
    ``tj.get_num_threads()`` threads (``_blocks``), between its prologue and epilogue."""
    v, g, floats, seed_vals = args
    m = plan.groups[0].m
    lo, hi = plan.spans()
    prologue, part, epilogue = module.prologue, module.part, module.epilogue
    partials = {"columns": max(1, len(plan.accumulators()))}

    def call(ins, outs):
        threads = executor.THREADS
        if threads == 1:
            return serial(ins, outs)
        prologue(v, g, floats, seed_vals, ins, outs)
        partial = _blocks(part, (v, g, floats, ins, outs), m, lo, hi, threads, partials)
        return epilogue(v, g, floats, ins, outs, partial)
    return call


def _blocks(part, args, m, lo, hi, threads, partials):
    """Long loop ``part`` (``m`` elements, gradient writes at ``lo .. hi`` from each element)
    in blocks on ``threads`` threads (the functions release the GIL).  Blocks whose
    gradient writes overlap (slices at different starts) run in two waves, even blocks
    then odd ones; each block's sums go to its row of ``partial`` (returned; the caller
    adds them in block order).  ``partials``: {blocks: partial} kept between calls, and
    the number of ``"columns"``."""
    overlap = hi > lo
    blocks = 2 * threads if overlap else threads
    if threads == 1 or m // blocks <= hi - lo:
        blocks = 1    # (blocks two apart would write the same gradient elements)
    partial = partials.get(blocks)
    if partial is None:
        partial = partials[blocks] = np.zeros((blocks, partials["columns"]))
    if blocks == 1:
        part(*args, 0, m, partial, 0)
        return partial
    bounds = [m * k // blocks for k in range(blocks + 1)]
    pool = _workers(threads - 1)
    for wave in (range(0, blocks, 2), range(1, blocks, 2)) if overlap else (range(blocks),):
        if not wave:
            continue
        first, *others = wave
        futures = [pool.submit(part, *args, bounds[k], bounds[k + 1], partial, k) for k in others]
        part(*args, bounds[first], bounds[first + 1], partial, first)
        for f in futures:
            f.result()
    return partial


def _split(module, args):
    """The replay of a trace of several steps with long loops: its segments in order, each
    long loop between them in blocks on ``tj.get_num_threads()`` threads (one block on one
    thread: ``run``'s bits; the sums of a loop depend on its number of blocks, as
    ``_threaded``'s)."""
    v, g, flags, floats, ints, seed_vals = args
    segments = [getattr(module, f"seg{k}") for k in range(len(module.SPLIT) + 1)]
    loops = [(getattr(module, f"part{k}"), m, lo, hi, {"columns": columns})
             for k, (m, lo, hi, columns) in enumerate(module.SPLIT)]
    nothing = np.zeros((1, 1))

    def call(ins, outs):
        threads = executor.THREADS
        result = segments[0](v, g, flags, floats, ints, seed_vals, ins, outs, nothing)
        for segment, (part, m, lo, hi, partials) in zip(segments[1:], loops):
            partial = _blocks(part, (v, g, floats, ins, outs), m, lo, hi, threads, partials)
            result = segment(v, g, flags, floats, ints, seed_vals, ins, outs, partial)
        return result
    return call


def _workers(n):
    """The thread pool of tier 2's blocks, with at least ``n`` workers."""
    if _pool[1] < n:
        _pool[:] = [ThreadPoolExecutor(n, thread_name_prefix="tapejit-tier2"), n]
    return _pool[0]


# ---- compiled.batch -------------------------------------------------------------------------

#: Elements of a block's values and adjoints (8192 float64: 64 KB, close to a core's L1
#: cache; measured on Rosenbrock's rows, 11 elements each: blocks of 128 or 256 rows run
#: 1.5x faster than blocks of 512), and the least and most rows of a block: a power of two.
ROWS_BLOCK_ELEMENTS = 1 << 13
ROWS_MIN_WIDTH = 16
ROWS_MAX_WIDTH = 512
_rows_of = weakref.WeakKeyDictionary()   # Frozen -> Rows
_rows_lock = threading.Lock()


class Rows(_Compile):
    """``compiled.batch``'s tier 2 for one frozen trace (``fused.generate_rows``): its state
    as ``Tier2``'s, and once ready the compiled ``rows`` function."""
    __slots__ = ("fn", "width", "base", "seed_values")

    def __init__(self, state, reason=None):
        super().__init__(state, reason)
        self.fn = None
        self.width = None
        self.base = None         # arena slot -> its number in a block (fused._RowsWriter.base)
        self.seed_values = None

    def ready(self, module, seconds, cached):
        self.seconds, self.cached = seconds, cached
        width = ROWS_MAX_WIDTH
        while width > ROWS_MIN_WIDTH and 2 * module.ROW_ELEMENTS * width > ROWS_BLOCK_ELEMENTS:
            width //= 2
        self.width = width
        self.fn = module.rows
        self.state = "ready"


def rows_stats(frozen):
    """``Rows.stats()`` of ``frozen``, or None before its first batch."""
    found = _rows_of.get(frozen)
    return found.stats() if found is not None else None


def _rows_for(frozen, mode):
    """``frozen``'s ``Rows``, made (and its compile started, see ``attach``) at its first batch."""
    with _rows_lock:
        found = _rows_of.get(frozen)
        if found is not None:
            return found
        if mode is False:
            found = Rows("off", "tier2=False")
        else:
            try:
                plan, source, base = fused.generate_rows(frozen)
            except fused.Ineligible as e:
                found = Rows("ineligible", str(e))
            else:
                found = Rows("compiling")
                found.key = fused.key(source)
                found.base = base
                found.seed_values = plan.seed_values
        _rows_of[frozen] = found
    if found.state == "compiling":
        _start(found, source, plan.dtype.name, mode)
    return found


def run_rows(frozen, mode, v0, in_at, xs, out_at, ys, grad_at, gxs):
    """``compiled.batch`` of ``frozen`` by its tier-2 function (``batch.py``'s arguments:
    ``xs``, ``ys``, ``gxs`` the batched arguments, values and gradients, a row per row of
    the batch; ``*_at`` their (slot, column, count)); False if it is not ready (tier 1's
    paths run the batch then), or ineligible, or a slot of these is not a row slot of the
    function (a result that is a parameter).  Blocks of rows are shared out to
    ``tj.get_num_threads()`` threads; rows are independent, so the thread count changes no
    bit of the results."""
    found = _rows_of.get(frozen) or _rows_for(frozen, mode)
    fn = found.fn
    if fn is None:
        return False
    dense = []
    for at in (in_at, out_at, grad_at):
        at = at.copy()
        try:
            at[:, 0] = [found.base[slot] for slot in at[:, 0].tolist()]
        except KeyError:
            return False
        dense.append(at)
    tape = frozen.tape
    width = found.width
    blocks = -(-xs.shape[0] // width)
    shares = max(1, min(blocks, executor.THREADS))
    bounds = [blocks * k // shares for k in range(shares + 1)]
    args = (v0, tape.floats[frozen.arena], found.seed_values, xs, dense[0], ys, dense[1], gxs, dense[2], width)
    futures = [_workers(shares - 1).submit(fn, *args, bounds[k], bounds[k + 1]) for k in range(1, shares)]
    fn(*args, bounds[0], bounds[1])
    for f in futures:
        f.result()
    return True


def lowest_priority():
    """A compiling process runs at the lowest priority: the caller's replays come first."""
    try:
        os.nice(19)
    except (AttributeError, OSError):
        pass


def _main(argv):
    """The compiling process: ``python -m tapejit.replay.tier2 <file> <dtype>``."""
    lowest_priority()
    path, dtype = argv
    _load(path, dtype)
    return 0


if __name__ == "__main__":
    sys.exit(_main(sys.argv[1:]))
