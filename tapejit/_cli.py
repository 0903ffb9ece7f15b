"""``python -m tapejit``'s commands: the demo (no command), ``warmup``, ``cache info|clear`` and ``stub``."""
import argparse
import os
import shutil
import sys
import threading
import time

DESCRIPTION = """\
With no command: the seed example, its tape, and a 10,000-op scalar graph timed.

commands:
  warmup         compile ahead every op group's sweeps for float64 and float32 (minutes
                 once per install; a program's first gradient then loads them)
  cache info     where tapejit's compiled-code cache is, its size, what it holds
  cache clear    delete this installation's compiled-code cache (asks first)
  stub           write tapejit/__init__.pyi, the type stub of tj.* and Tensor's methods, from
                 the op registry and the installed front ends (--check: exit 1 if it is stale)
"""


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m tapejit", description=DESCRIPTION,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    commands = parser.add_subparsers(dest="command", metavar="{warmup,cache,stub}")
    warm = commands.add_parser("warmup", help="compile every op group's sweeps ahead")
    warm.add_argument("--groups", help="comma-separated op groups (default: all of them)")
    warm.add_argument("--dtypes", default="float64,float32", help="comma-separated float dtypes "
                      "(default: float64,float32)")
    warm.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                      help="processes compiling at once (default: one per CPU core)")
    warm.add_argument("--quiet", action="store_true", help="no progress on stderr")
    cache = commands.add_parser("cache", help="the compiled-code cache: info or clear")
    cache.add_argument("action", choices=["info", "clear"])
    cache.add_argument("--yes", action="store_true", help="clear without asking")
    stub = commands.add_parser("stub", help="write the type stub tapejit/__init__.pyi")
    stub.add_argument("--check", action="store_true", help="only check that it is current")
    args = parser.parse_args(argv)
    if args.command is None:
        demo()
        return 0
    if args.command == "warmup":
        return warmup(args.groups, args.dtypes, args.quiet, args.jobs)
    if args.command == "stub":
        return write_stub(args.check)
    return cache_info() if args.action == "info" else cache_clear(args.yes)


def write_stub(check):
    from tapejit import _stub
    if check:
        current = _stub.is_current()
        print(f"{_stub.path()} is {'current' if current else 'stale: run python -m tapejit stub'}")
        return 0 if current else 1
    print(f"wrote {_stub.write()}")
    return 0


def _names(text):
    return [name.strip() for name in text.split(",") if name.strip()]


def warmup(groups, dtypes, quiet, jobs=1):
    from tapejit import precompile, registry
    groups = _names(groups) if groups else list(registry.GROUPS)
    try:
        work = precompile.steps(groups, _names(dtypes))
    except (ValueError, TypeError) as e:
        print(f"python -m tapejit warmup: {e}", file=sys.stderr)
        return 2
    if jobs < 1:
        print(f"python -m tapejit warmup: --jobs expects a positive integer, got {jobs}", file=sys.stderr)
        return 2
    progress = None if quiet else Progress(sys.stderr)
    try:
        elapsed = precompile.precompile(groups, _names(dtypes), progress, jobs=min(jobs, len(work)))
    finally:
        if progress is not None:
            progress.stop()
    if not quiet:
        print(f"compiled or loaded {len(work)} steps in {elapsed:.1f} s; cache: "
              f"{_cache_folder()}", file=sys.stderr)
    return 0


def _clock(seconds):
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}:{seconds:02d}"


class Progress:
    """A text progress bar on ``stream``: the step running, steps done, elapsed time.  On a
    terminal one line, redrawn every second while a step compiles; elsewhere (a log, CI) a
    line per step."""

    WIDTH = 24

    def __init__(self, stream):
        self.stream = stream
        self.live = stream.isatty()
        self.start = time.perf_counter()
        self.line = ""
        self.lock = threading.Lock()
        self.done = threading.Event()
        if self.live:
            threading.Thread(target=self._tick, daemon=True, name="tapejit-progress").start()

    def __call__(self, done, total, label, elapsed):
        filled = self.WIDTH * done // total
        bar = "#" * filled + "." * (self.WIDTH - filled)
        self.line = f"[{bar}] {done}/{total}  " + (label if label is not None else "done")
        with self.lock:
            if self.live:
                self._draw()
                if label is None:
                    self.stream.write("\n")
            else:
                self.stream.write(f"{self.line}  {_clock(time.perf_counter() - self.start)}\n")
            self.stream.flush()

    def _draw(self):
        self.stream.write(f"\r\033[K{self.line}  {_clock(time.perf_counter() - self.start)}")

    def _tick(self):
        while not self.done.wait(1.0):
            with self.lock:
                self._draw()
                self.stream.flush()

    def stop(self):
        self.done.set()


def _cache_folder():
    from tapejit import _numba_load
    return _numba_load.cache_dir()


def _size(folder):
    total = 0
    for root, _, files in os.walk(folder):
        for name in files:
            try:
                total += os.lstat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


def _megabytes(n):
    return f"{n / 1e6:.1f} MB"


def _entries(folder, prefix=""):
    """``{function: compiled signatures}`` from Numba's file names in ``folder``
    (``<module>.<function>-<line>.py311.nbi`` and one ``...<k>.nbc`` per signature)."""
    found = {}
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        if not name.startswith(prefix) or not name.endswith((".nbi", ".nbc")):
            continue
        function = name[len(prefix):].split("-", 1)[0]
        found.setdefault(function, 0)
        if name.endswith(".nbc"):
            found[function] += 1
    return found


def cache_info():
    import numba

    from tapejit import __version__, _numba_load, registry
    folder = _numba_load.cache_dir()
    print(f"tapejit {__version__}, Numba {numba.__version__} (tested with {_numba_load.TESTED_NUMBA})")
    if not os.path.isdir(folder):
        print(f"cache folder: {folder} (empty: nothing compiled yet)")
        return 0
    print(f"cache folder: {folder} ({_megabytes(_size(folder))})")
    numba_dir = os.environ.get("NUMBA_CACHE_DIR")
    if numba_dir:
        print(f"Numba's entries: in NUMBA_CACHE_DIR, {numba_dir}")
    digest = registry.registry_hash()
    modules = sorted(name[:-3] for name in os.listdir(folder) if _generated(name) and name.endswith(".py"))
    print("sweeps, per op group (each op's sweeps compiled on their own):" if modules else "sweeps: none yet")
    for name in modules:
        label = "entry points" if name == "sweeps" else name[len("sweep_"):]
        try:
            recorded = open(os.path.join(folder, name + ".sha256")).read().split()[0]
        except (OSError, IndexError):
            recorded = None
        state = "" if recorded == digest else "  (stale: another tapejit's ops; compiled again on use)"
        entries = _entries(os.path.join(folder, "__pycache__"), name + ".")
        compiled = ", ".join(f"{fn} x{n}" for fn, n in sorted(entries.items()) if n) or "nothing compiled"
        print(f"  {label}{state}\n    {sum(entries.values())} compiled entries: {compiled}")
    own = os.path.join(folder, "numba")
    functions = {}
    for sub in sorted(os.listdir(own)) if os.path.isdir(own) else ():
        for fn, n in _entries(os.path.join(own, sub)).items():
            functions[fn] = functions.get(fn, 0) + n
    if functions:
        print(f"tapejit's other compiled functions: {', '.join(f'{fn} x{n}' for fn, n in sorted(functions.items()))}")
    tier2 = os.path.join(folder, "tier2")
    traces = [n for n in os.listdir(tier2) if n.endswith(".py")] if os.path.isdir(tier2) else []
    if traces:
        print(f"tier 2 (tj.compile): {len(traces)} traces' fused functions ({_megabytes(_size(tier2))})")
    return 0


def _generated(filename):
    """Whether ``filename`` (in the cache folder or its ``__pycache__``) belongs to a
    generated module: ``sweeps`` (the entry points), ``sweep_<group>`` or ``rows`` (batched
    replay, tapejit/replay/rows.py)."""
    return filename.startswith("sweep_") or filename.split(".")[0] in ("sweeps", "rows")


def _ours(folder):
    """The paths in ``folder`` that tapejit's cache writes: the generated modules and their
    records, their bytecode and Numba's entries beside them, Numba's entries for tapejit's
    own modules (``numba/``) and tier 2's functions per trace (``tier2/``).  Nothing else:
    ``TAPEJIT_CACHE_DIR`` may name a folder that holds other files too."""
    paths = [os.path.join(folder, n) for n in sorted(os.listdir(folder)) if _generated(n)]
    pycache = os.path.join(folder, "__pycache__")
    if os.path.isdir(pycache):
        paths += [os.path.join(pycache, n) for n in sorted(os.listdir(pycache)) if _generated(n)]
    paths += [os.path.join(folder, n) for n in ("numba", "tier2") if os.path.isdir(os.path.join(folder, n))]
    return paths


def cache_clear(yes):
    from tapejit import _numba_load
    folder = _numba_load.cache_dir()
    paths = _ours(folder) if os.path.isdir(folder) else []
    files = sum(sum(len(f) for _, _, f in os.walk(p)) if os.path.isdir(p) else 1 for p in paths)
    if not files:               # (importing tapejit makes the empty folders of its entries)
        print(f"nothing to clear in {folder}")
        return 0
    size = _megabytes(sum(_size(p) if os.path.isdir(p) else os.lstat(p).st_size for p in paths))
    if not yes:
        try:
            answer = input(f"delete tapejit's compiled code in {folder} ({size})? [y/N] ")
        except EOFError:
            answer = ""
        if answer.strip().lower() not in ("y", "yes"):
            print("kept it (pass --yes to delete without asking)")
            return 1
    for path in paths:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.unlink(path)
    for empty in (os.path.join(folder, "__pycache__"), folder):    # left if anything else is in it
        try:
            os.rmdir(empty)
        except OSError:
            pass
    print(f"deleted tapejit's compiled code in {folder} ({size})")
    if os.environ.get("NUMBA_CACHE_DIR"):
        print(f"(Numba's entries in NUMBA_CACHE_DIR, {os.environ['NUMBA_CACHE_DIR']}, are Numba's to manage)")
    return 0


def demo():
    import tapejit as tj
    import tapejit.nn.functional as F
    from tapejit import demo as workloads
    from tapejit.summary import tape_table

    w = tj.tensor(2.0, requires_grad=True)
    x = tj.tensor(3.0)
    b = tj.tensor(1.0, requires_grad=True)
    y_true = tj.tensor(10.0)
    loss = (w * x + b - y_true) ** 2
    print("L = (w*x + b - y_true)**2 with w=2, x=3, b=1, y_true=10")
    print(tape_table(loss))
    loss.backward()
    print(f"L = {loss.item():g}   w.grad = {w.grad.item():g}   b.grad = {b.grad.item():g}   "
          f"x.grad = {x.grad}")
    print()

    def scalar_graph(n_ops):
        _, out = workloads.scalar_graph(tj, F, n_ops)
        out.backward()

    scalar_graph(200)  # compile (or load from cache) the float64 sweeps
    best = float("inf")
    for _ in range(5):
        t0 = time.perf_counter()
        scalar_graph(10_000)
        best = min(best, time.perf_counter() - t0)
    print(f"10,000-op scalar graph (about 30,000 tensor ops), record + backward: {best * 1e3:.1f} ms")
