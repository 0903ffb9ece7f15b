"""Start-up: a fresh interpreter imports the library and takes its first gradient.

SPEC.md section 5: ``import tapejit`` plus the first gradient in under 1 s with a warm
cache, under 20 s with a cold one.  tapejit has two caches, and "cold" empties both:

* the generated sweep modules (``tapejit/codegen.py`` writes ``sweeps.py`` and ``sweep_<group>.py`` into
  ``$TAPEJIT_CACHE_DIR`` when that is set, else this installation's folder in the user's
  cache directory, never the installed package), and
* Numba's compiled code for them (``__pycache__`` beside each module, or
  ``$NUMBA_CACHE_DIR`` when that is set).

The cold child gets a new, empty directory for each, so it generates and compiles every
sweep its first gradient uses.
"""
import os
import re
import subprocess
import sys

import pytest
import targets as T
import workloads as W

STARTUP_ROUNDS = 5
STARTUP_PEERS = ("tapejit", "torch", "jax", "autograd")


def _run_startup(name, env=None):
    """Runs the start-up child; returns the import + gradient time it measured itself."""
    proc = subprocess.run([sys.executable, "-c", W.startup_script(name)],
                          check=False, capture_output=True, text=True, timeout=900, env=env)
    if proc.returncode != 0:
        raise AssertionError(f"{name} start-up script failed ({proc.returncode}):\n{proc.stderr}")
    match = re.search(r"IN_PROCESS_S (\S+)", proc.stdout)
    assert match, proc.stdout
    return float(match.group(1))


def _compile_bytecode():
    """Write tapejit's ``.pyc`` files, as ``pip install`` does for the peers in
    site-packages.  An editable checkout run with ``PYTHONDONTWRITEBYTECODE=1`` (this
    machine sets it) would otherwise compile every edited module from source at every
    start, about 0.2 s that no installed copy pays."""
    import compileall

    import tapejit
    compileall.compile_dir(os.path.dirname(tapejit.__file__), quiet=1)


@pytest.mark.parametrize("peer", STARTUP_PEERS, indirect=True)
def test_startup(peer, benchmark):
    """Wall time of ``python -c 'import X; <tiny float64 gradient>'`` with warm caches.

    The first (untimed) run fills Numba's on-disk cache if needed, and the OS file cache.
    ``extra_info["in_process_s"]`` is the import + gradient time measured inside the child
    (without the interpreter's own start-up).  The child checks its gradient.
    """
    benchmark.group = T.GROUP_STARTUP
    if peer.name == "tapejit":
        _compile_bytecode()
    if not benchmark.disabled:
        _run_startup(peer.name)        # warm: Numba cache, OS page cache
    inner = []
    benchmark.pedantic(lambda: inner.append(_run_startup(peer.name)),
                       rounds=STARTUP_ROUNDS, iterations=1)
    benchmark.extra_info["in_process_s"] = round(sum(inner) / len(inner), 4)


@pytest.mark.parametrize("peer", ("tapejit",), indirect=True)
def test_startup_cold(peer, benchmark, tmp_path):
    """As ``test_startup`` with both of tapejit's caches empty (one round: it compiles)."""
    benchmark.group = T.GROUP_STARTUP_COLD
    if benchmark.disabled and os.environ.get("TAPEJIT_BENCH_COLD") != "1":
        # The untimed run keeps benchmarks correct; a cold compile there only costs time
        # (tests/test_codegen.py covers compiling from empty caches).
        pytest.skip("cold start-up is timed only; set TAPEJIT_BENCH_COLD=1 to run it untimed")
    numba_cache, sweep_dir = tmp_path / "numba-cache", tmp_path / "tapejit-sweeps"
    numba_cache.mkdir()
    sweep_dir.mkdir()
    env = dict(os.environ, NUMBA_CACHE_DIR=str(numba_cache), TAPEJIT_CACHE_DIR=str(sweep_dir))
    inner = benchmark.pedantic(_run_startup, args=(peer.name, env), rounds=1, iterations=1)
    # the child really started cold: it generated its sweeps and Numba cached them here
    assert list(sweep_dir.glob("sweep_*.py")), "no sweep was generated in TAPEJIT_CACHE_DIR"
    assert list(numba_cache.rglob("*.nbi")), "Numba cached nothing in NUMBA_CACHE_DIR"
    benchmark.extra_info["in_process_s"] = round(inner, 3)


@pytest.mark.parametrize("example", [i for i, _, _ in T.readme_examples()])
@pytest.mark.parametrize("peer", ("tapejit",), indirect=True)
def test_readme_example_cold(peer, example, benchmark, tmp_path):
    """Each Python example of the README, run as a new user would the first time: a fresh
    interpreter with both of tapejit's caches empty, so it compiles every op sweep it uses
    (one round).  The time is the whole run, import and the example's own work included."""
    benchmark.group = T.GROUP_README_COLD
    if benchmark.disabled and os.environ.get("TAPEJIT_BENCH_COLD") != "1":
        pytest.skip("cold start-up is timed only; set TAPEJIT_BENCH_COLD=1 to run it untimed")
    _, line, source = T.readme_examples()[example]
    numba_cache, sweep_dir = tmp_path / "numba-cache", tmp_path / "tapejit-sweeps"
    env = dict(os.environ, NUMBA_CACHE_DIR=str(numba_cache), TAPEJIT_CACHE_DIR=str(sweep_dir))

    def run():
        proc = subprocess.run([sys.executable, "-c", source], check=False, capture_output=True, text=True,
                              timeout=900, env=env, cwd=tmp_path)
        assert proc.returncode == 0, f"README example at line {line} failed:\n{proc.stderr}"

    benchmark.pedantic(run, rounds=1, iterations=1)
    benchmark.extra_info["readme_line"] = line
