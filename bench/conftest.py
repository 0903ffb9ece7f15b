"""Benchmark set-up: one thread everywhere, peers skipped when missing, a ratio summary.

Thread counts must be fixed before NumPy, SciPy, Numba or torch is first imported (their
thread pools read these variables once), hence the ``os.environ`` lines come first.
``setdefault`` lets a caller override them on purpose, e.g. ``OMP_NUM_THREADS=2 pytest bench``.
"""
import os

_THREAD_VARS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "NUMBA_NUM_THREADS")
for _var in _THREAD_VARS:
    os.environ.setdefault(_var, "1")

import importlib.metadata  # noqa: E402
import sys  # noqa: E402

# Numerical modules some plugin imported before this file ran: their pools may not be 1-thread.
_PREIMPORTED = sorted(m for m in ("numpy", "scipy", "numba", "torch") if m in sys.modules)

import pytest  # noqa: E402

import workloads  # noqa: E402

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
    except Exception:
        return "not installed"


def pytest_report_header(config):
    threads = ", ".join(f"{v}={os.environ.get(v)}" for v in _THREAD_VARS)
    torch_threads = _torch.get_num_threads() if _torch is not None else "-"
    lines = [f"bench: {threads}, torch.get_num_threads()={torch_threads}",
             "bench: " + ", ".join(f"{m} {_version(m)}"
                                   for m in ("tapejit", "torch", "numpy", "scipy", "numba"))]
    if _PREIMPORTED:
        lines.append(f"bench: WARNING {_PREIMPORTED} were imported before bench/conftest.py set "
                     "the thread variables; export them in the shell to be sure")
    return lines


def _fmt(seconds):
    for unit, scale in (("s", 1.0), ("ms", 1e-3), ("us", 1e-6)):
        if seconds >= scale:
            return f"{seconds / scale:8.3f} {unit:2s}"
    return f"{seconds / 1e-9:8.3f} ns"


def _ratio_lines(benchmarks):
    """Per group: mean, median and min of each peer, and each peer's time over tapejit's.

    ``peer/tapejit`` > 1 means tapejit is faster; for a peer that is faster than tapejit
    (NumPy) read its inverse, ``tapejit/peer``: how many times slower tapejit is.
    """
    groups, notes = {}, {}
    for bench in benchmarks:
        stats = getattr(bench, "stats", None)
        name = (getattr(bench, "params", None) or {}).get("peer")
        if stats is None or name is None:
            continue
        groups.setdefault(bench.group, {})[name] = (stats.mean, stats.median, stats.min)
        extra = {k: v for k, v in (getattr(bench, "extra_info", None) or {}).items()
                 if k in ("records", "ns_per_record", "ns_per_record_median", "in_process_s")}
        if extra:
            notes.setdefault(bench.group, []).append(
                f"  {name}: " + ", ".join(f"{k}={v}" for k, v in extra.items()))
    lines = []
    for group, times in groups.items():
        lines.append(group)
        lines.append(f"  {'peer':8s} {'mean':>11s} {'median':>11s} {'min':>11s}"
                     "   peer/tapejit (mean, median)   tapejit/peer (mean, median)")
        base = times.get("tapejit")
        for name, (mean, median, low) in sorted(times.items(), key=lambda kv: kv[1][0]):
            ratio = ""
            if base and name != "tapejit":
                ratio = (f"   {mean / base[0]:8.2f} {median / base[1]:8.2f}          "
                         f"   {base[0] / mean:8.2f} {base[1] / median:8.2f}")
            lines.append(f"  {name:8s} {_fmt(mean)} {_fmt(median)} {_fmt(low)}{ratio}")
        lines.extend(notes.get(group, ()))
        target = workloads.TARGETS.get(group)
        if target and base:
            other, kind, bound, text = target
            verdicts = []
            for i, stat in ((0, "mean"), (1, "median")):
                if kind == "seconds":
                    ok = base[i] <= bound
                elif other in times:
                    ratio = times[other][i] / base[i]
                    ok = ratio >= bound if kind == "speedup" else 1.0 / ratio <= bound
                else:
                    ok = None
                verdicts.append(f"{stat}: " + {True: "met", False: "NOT met", None: "peer missing"}[ok])
            lines.append(f"  target ({text}): {', '.join(verdicts)}")
    return lines


@pytest.hookimpl(trylast=True)
def pytest_terminal_summary(terminalreporter, config):
    session = getattr(config, "_benchmarksession", None)   # pytest-benchmark's session
    benchmarks = getattr(session, "benchmarks", None)
    if not benchmarks or getattr(session, "disabled", False):
        return
    try:
        lines = _ratio_lines(benchmarks)
    except Exception as exc:  # the summary is a convenience; never fail the run over it
        lines = [f"(ratio summary unavailable: {exc!r})"]
    if lines:
        terminalreporter.write_sep("-", "bench: mean times and ratios per group")
        for line in lines:
            terminalreporter.write_line(line)
