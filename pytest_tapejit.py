"""tapejit's pytest plugin (the ``pytest11`` entry point ``tapejit``): the ``tapejit_warm``
fixture, for benchmark suites whose timings must never include a compile.

A test (or a session-scoped fixture of the suite's) that asks for ``tapejit_warm`` runs
after tapejit has compiled, or loaded from its cache, the sweeps of the chosen op groups for
float64 and float32 (``tapejit.precompile``: the work of ``python -m tapejit warmup``), once
per test run, and with ``tj.set_num_threads`` pinned (1 unless ``--tapejit-threads`` or the
``tapejit_threads`` ini option says otherwise), as benchmark set-ups pin torch's.  The
fixture's value is the ``tapejit`` module.

This module is outside the ``tapejit`` package on purpose: pytest imports every plugin at
start-up, and importing ``tapejit`` (Numba, SciPy) costs a second or more.  Test runs that do
not ask for the fixture never import tapejit through it.
"""
import pytest


def pytest_addoption(parser):
    group = parser.getgroup("tapejit")
    group.addoption("--tapejit-threads", type=int, default=None, metavar="N",
                    help="tj.set_num_threads(N) for tests using tapejit_warm (default: the "
                         "tapejit_threads ini option, else 1)")
    parser.addini("tapejit_threads", default="1",
                  help="threads inside one tapejit op for tests using tapejit_warm (default 1)")
    parser.addini("tapejit_groups", default="",
                  help="op groups tapejit_warm compiles ahead, comma-separated (default: all)")


def _threads(config):
    value = config.getoption("tapejit_threads")
    source = "--tapejit-threads"
    if value is None:
        value, source = config.getini("tapejit_threads"), "the tapejit_threads ini option"
    try:
        n = int(value)
    except (TypeError, ValueError):
        n = 0
    if n < 1:
        raise pytest.UsageError(f"{source} expects a positive integer, got {value!r}")
    return n


@pytest.fixture(scope="session")
def tapejit_warm(request):
    """tapejit with its sweeps compiled ahead and its threads pinned (see the module)."""
    threads = _threads(request.config)
    groups = [g.strip() for g in request.config.getini("tapejit_groups").split(",") if g.strip()]
    import tapejit
    from tapejit import precompile
    try:
        precompile.precompile(groups or None)
    except ValueError as e:
        raise pytest.UsageError(f"tapejit_groups: {e}") from None
    before = tapejit.get_num_threads()
    tapejit.set_num_threads(threads)
    yield tapejit
    tapejit.set_num_threads(before)
