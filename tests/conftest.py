"""Test-session set-up shared by every test file."""
import os

# tj.compile's tier 2 compiles each new trace in a background process: a suite of hundreds
# of traces would start hundreds.  Tests that exercise tier 2 ask for it (test_replay*.py).
os.environ.setdefault("TAPEJIT_TIER2", "off")
# Batches use the row module compiled in the caller (the warmup below compiles it ahead), not
# a background child: a test's path then never depends on how fast another process compiles.
os.environ.setdefault("TAPEJIT_BATCH_ROWS", "sync")


def pytest_collection_modifyitems(items):
    """The float32 copies of parametrized tests (a parameter id naming float32) are marked
    slow, with the float32 and tier-2 matrices and the memory-growth loops: the README's
    test command runs every test in float64, tier 1, and ``.ci/run``'s slow lane runs the
    rest.  Float32 compiles every op's sweeps a second time, for another arena type."""
    import pytest
    for item in items:
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "float32" in callspec.id:
            item.add_marker(pytest.mark.slow)


def _compiles_float32(config):
    """Whether this run's tests need the float32 sweeps: not when it leaves out the slow
    tests (the README's ``-m "not slow"``), which hold the float32 copies.  A wrong guess
    only costs time: a sweep the warmup left out compiles on first use."""
    return "not slow" not in (config.option.markexpr or "")


def pytest_configure(config):
    """Under pytest-xdist (``-n N``), compile the sweeps ahead in N processes before the
    workers start.  Each worker would otherwise compile the same sweeps at the same time on
    a cold cache (each on one core); split by entry point and dtype, the N processes share
    the work instead.  On a warm cache this only loads them (a few seconds)."""
    workers = getattr(config.option, "numprocesses", None)
    if not isinstance(workers, int) or workers < 2 or hasattr(config, "workerinput"):
        return
    import sys
    import time
    from tapejit import precompile
    start = time.perf_counter()
    dtypes = precompile.DTYPES if _compiles_float32(config) else precompile.DTYPES[:1]
    precompile.precompile(dtypes=dtypes, jobs=workers)
    print(f"tapejit: sweeps of every op group for {' and '.join(d.__name__ for d in dtypes)} "
          f"compiled or loaded in {workers} processes in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
