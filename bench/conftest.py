"""Benchmark set-up: one thread everywhere, peers skipped when missing, a ratio summary.

Thread counts must be fixed before NumPy, SciPy, Numba, torch or JAX is first imported
(their thread pools read these variables once), hence the ``os.environ`` lines come first.
``setdefault`` lets a caller override them on purpose, e.g. ``OMP_NUM_THREADS=2 pytest bench``.

Numba is the exception: ``NUMBA_NUM_THREADS`` is the size of its pool, fixed at import,
and the batched-replay group compares 1 and 2 threads, so the pool gets up to 2 threads
(``NUMBA_POOL``) while ``numba.set_num_threads(1)`` below makes every benchmark run on
one; that group alone raises it to 2 and puts it back.  Numba uses its pool only for
``prange`` loops, which in tapejit only the batched replay has.
"""
import os

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
#: Numba's pool: up to 2 threads (see above); every other library gets one thread
NUMBA_POOL = str(min(2, os.cpu_count() or 1))
for _var in _THREAD_VARS:
    os.environ.setdefault(_var, NUMBA_POOL if _var == "NUMBA_NUM_THREADS" else "1")
# XLA's CPU client: Eigen's thread pool off, one intra-op thread; CPU only.
_XLA_ONE_THREAD = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"
if "xla_cpu_multi_thread_eigen" not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + _XLA_ONE_THREAD).strip()
os.environ.setdefault("JAX_PLATFORMS", "cpu")
# tj.compile's tier 2 off unless a row asks for it (tier2=...): a compile finishing in the
# background would switch a timed row from tier 1 to tier 2 mid-run.
os.environ.setdefault("TAPEJIT_TIER2", "off")
# Workloads A and C are float64; without this JAX silently computes them in float32.
os.environ["JAX_ENABLE_X64"] = "1"

import importlib.metadata
import sys

# Numerical modules some plugin imported before this file ran: their pools may not be 1-thread.
_PREIMPORTED = sorted(m for m in ("numpy", "scipy", "numba", "torch", "jax") if m in sys.modules)

import numba as _numba
import pytest
import peers_functional  # noqa: F401  (adds the functional peers' workloads to workloads.py)
import targets
import workloads

# the pool may have 2 threads (NUMBA_POOL); benchmarks use 1 unless they say otherwise
_numba.set_num_threads(1)

try:
    import torch as _torch
except ImportError:  # torch is an optional peer
    _torch = None
else:
    _torch.set_num_threads(1)


def load_peer(name):
    """The ``workloads.Lib`` for peer ``name``; skips the test with the reason if missing."""
    module, hint = workloads.PEERS[name]
    pytest.importorskip(module, reason=f"peer {name!r} is not installed ({hint})")
    return workloads.library(name)


@pytest.fixture
def peer(request):
    """Parametrise with ``@pytest.mark.parametrize("peer", [...], indirect=True)``."""
    return load_peer(request.param)


# ---------------------------------------------------------------------------------------
# report header and a per-group ratio summary after pytest-benchmark's table

def _version(module):
    try:
        return importlib.metadata.version(module)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


#: distributions whose versions the header, the JSON and the report show
VERSIONED = ("tapejit", "torch", "jax", "jaxlib", "autograd", "numpy", "scipy", "numba",
             "pytest-benchmark")


def pytest_report_header(config):
    threads = ", ".join(f"{v}={os.environ.get(v)}" for v in _THREAD_VARS)
    torch_threads = _torch.get_num_threads() if _torch is not None else "-"
    lines = [(f"bench: {threads}, torch.get_num_threads()={torch_threads}, "
              f"numba.get_num_threads()={_numba.get_num_threads()} (2 in the batched-replay group only)"),
             f"bench: XLA_FLAGS={os.environ.get('XLA_FLAGS')}",
             "bench: " + ", ".join(f"{m} {_version(m)}" for m in VERSIONED)]
    if _PREIMPORTED:
        lines.append(f"bench: WARNING {_PREIMPORTED} were imported before bench/conftest.py set "
                     "the thread variables; export them in the shell to be sure")
    return lines


def pytest_benchmark_update_machine_info(config, machine_info):
    """Library versions and thread settings into ``--benchmark-json`` (for report.py)."""
    machine_info["bench_versions"] = {m: _version(m) for m in VERSIONED}
    machine_info["bench_threads"] = {v: os.environ.get(v) for v in _THREAD_VARS + ("XLA_FLAGS",)}
    machine_info["bench_threads"]["numba threads used"] = "1 (the batched-replay group: 1 and 2)"
    machine_info["bench_cpu_count"] = os.cpu_count()


# ---------------------------------------------------------------------------------------
# a per-group summary after pytest-benchmark's table: figures, ratios, SPEC targets

def _fmt(value, group):
    return targets.human(value, group, terminal=True)


#: extra_info keys worth a line under the group
_NOTES = ("records", "ns_per_record", "us_per_op", "us_per_row", "records_traced", "in_process_s", "workload_mb",
          "baseline_mb", "peak_mb", "bytes_per_op", "rss_growth_mb")


def _rows(benchmarks):
    rows = []
    for bench in benchmarks:
        stats = getattr(bench, "stats", None)
        if stats is None:
            continue
        figures = {"mean": stats.mean, "median": stats.median, "min": stats.min}
        rows.append((bench.group, getattr(bench, "params", None) or {}, figures,
                     getattr(bench, "extra_info", None) or {}))
    return targets.labelled(rows)


def _ratio_lines(benchmarks):
    """Per group: mean, median and min of each row, and each row over tapejit's.

    ``row/tapejit`` > 1 means tapejit is faster (or uses less memory); for a peer faster
    than tapejit (NumPy) read ``tapejit/row``: how many times slower tapejit is.
    """
    rows = _rows(benchmarks)
    tables = {stat: targets.table(rows, stat) for stat in ("mean", "median", "min")}
    notes = {}
    for group, label, _, extra in rows:
        found = {k: extra[k] for k in _NOTES if k in extra}
        if found:
            notes.setdefault(group, []).append(f"  {label}: "
                                               + ", ".join(f"{k}={v}" for k, v in found.items()))
    lines = []
    for group, medians in tables["median"].items():
        lines.append(group)
        lines.append(f"  {'row':22s} {'mean':>11s} {'median':>11s} {'min':>11s}"
                     "   row/tapejit (mean, median)   tapejit/row (mean, median)")
        base = (tables["mean"][group].get("tapejit"), medians.get("tapejit"))
        for label in sorted(medians, key=medians.get):
            mean, median, low = (tables[s][group][label] for s in ("mean", "median", "min"))
            ratio = ""
            if base[0] and base[1] and label != "tapejit":
                ratio = (f"   {mean / base[0]:8.2f} {median / base[1]:8.2f}          "
                         f"   {base[0] / mean:8.2f} {base[1] / median:8.2f}")
            lines.append(f"  {label:22s} {_fmt(mean, group)} {_fmt(median, group)} "
                         f"{_fmt(low, group)}{ratio}")
        lines.extend(notes.get(group, ()))
    lines.append("Targets: SPEC section 5 and the replay groups (median; mean in brackets)")
    for by_median, by_mean in zip(targets.evaluate_all(tables["median"]),
                                  targets.evaluate_all(tables["mean"])):
        target = by_median.target
        lines.append(f"  {target.group}: {target.text}: {by_median.detail} [{by_mean.detail}]")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)   # pytest-benchmark's session
    benchmarks = getattr(session, "benchmarks", None)
    if not benchmarks or getattr(session, "disabled", False):
        return
    try:
        lines = _ratio_lines(benchmarks)
    except Exception as exc:  # noqa: BLE001 -- the summary is a convenience: never fail the run over it
        lines = [f"(ratio summary unavailable: {exc!r})"]
    if lines:
        terminalreporter.write_sep("-", "bench: figures and ratios per group")
        for line in lines:
            terminalreporter.write_line(line)
