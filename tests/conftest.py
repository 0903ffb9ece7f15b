"""Test-session set-up shared by every test file."""
import os

# tj.compile's tier 2 compiles each new trace in a background process: a suite of hundreds
# of traces would start hundreds.  Tests that exercise tier 2 ask for it (test_replay*.py).
os.environ.setdefault("TAPEJIT_TIER2", "off")


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
    precompile.precompile(jobs=workers)
    print(f"tapejit: sweeps of every op group compiled or loaded in {workers} processes in "
          f"{time.perf_counter() - start:.0f} s", file=sys.stderr)
