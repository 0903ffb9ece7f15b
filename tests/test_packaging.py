"""Packaging and tooling: one version string, the LICENSE in the wheel, the tested Numba
range, BLAS threads through threadpoolctl, a read-only install, ``python -m tapejit``'s
commands (warmup, cache info|clear), the compile log line and the pytest plugin.

Programs that compile run in subprocesses with a cache folder of their own (``slow``: tens
of seconds to minutes); the others reuse the suite's cache (tests/conftest.py compiles every op's sweeps
ahead), where loading the sweeps takes a second.
"""
import ast
import logging
import os
import re
import shutil
import subprocess
import sys
import textwrap
import time
import zipfile
from pathlib import Path

import numba
import numpy as np
import pytest
from numba.core import config

import tapejit
import tapejit as tj
from tapejit import _cli, _jit, _numba_load, precompile, registry

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent


def pyproject():
    tomllib = pytest.importorskip("tomllib")     # Python 3.11+
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


posix_only = pytest.mark.skipif(os.name != "posix", reason="POSIX folder modes")
COMPILING = "compiling "

# Every path a program's sweeps take, for both float dtypes, using only the arith group:
# eager forward and backward, chunked runs (large elementwise records), a tj.compile
# replay and its batched replay.
EVERY_PATH = textwrap.dedent("""
    import logging
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    import numpy as np
    import tapejit as tj
    for dt, npdt in ((tj.float64, np.float64), (tj.float32, np.float32)):
        x = tj.tensor([1.0, 2.0], dtype=dt, requires_grad=True)
        (x * x - x).backward(tj.ones(2, dtype=dt))
        assert x.grad.tolist() == [1.0, 3.0], x.grad
        big = tj.ones(1 << 17, dtype=dt, requires_grad=True)
        (big * big + big).backward(tj.ones(1 << 17, dtype=dt))
        assert float(big.grad[0]) == 3.0
        g = tj.compile(tj.grad(lambda x: x * x + x))
        assert float(g(np.array(2.0, npdt))) == 5.0 and float(g(np.array(2.0, npdt))) == 5.0
        rows = g.batch(np.array([1.0, 2.0, 3.0], npdt))
        assert np.asarray(rows).tolist() == [3.0, 5.0, 7.0], rows
    print("every path ok")
""")

# A gradient through two op groups (arith and sum), with the compile log shown.
LOGGED = textwrap.dedent("""
    import logging
    logging.basicConfig(level=logging.INFO, format="%(name)s %(levelname)s %(message)s")
    import tapejit as tj
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    (x * x).sum().backward()
    print("grad", x.grad.tolist())
""")


def run(args, cache=None, input=None, check=True, **env_changes):
    """``python args...`` in a fresh interpreter; with ``cache``, its own cache folder."""
    env = dict(os.environ)
    if cache is not None:
        env.pop("NUMBA_CACHE_DIR", None)
        env["TAPEJIT_CACHE_DIR"] = str(cache)
    env.update({name: str(value) for name, value in env_changes.items()})
    # Not from the project's folder, whose tapejit would come first on the path: the child
    # imports tapejit as this process does (an install, or PYTHONPATH), so it has the same
    # default cache folder (one per installation).
    out = subprocess.run([sys.executable, *args], env=env, capture_output=True, text=True, input=input,
                         timeout=1800, cwd=ROOT / "tests")
    if check:
        assert out.returncode == 0, out.stdout + out.stderr
    return out


def tapejit_cli(*args, **kw):
    return run(["-m", "tapejit", *args], **kw)


# ---- one version, the license, the Numba range --------------------------------------------

def test_the_version_is_written_once():
    toml = pyproject()
    assert "version" not in toml["project"] and "version" in toml["project"]["dynamic"]
    assert toml["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "tapejit._version.__version__"}
    # a plain literal: setuptools reads it without importing tapejit (and Numba) at build time
    tree = ast.parse((ROOT / "tapejit" / "_version.py").read_text())
    assigned = [node for node in tree.body if isinstance(node, ast.Assign)]
    assert len(assigned) == 1 and isinstance(assigned[0].value, ast.Constant)
    assert tapejit.__version__ == assigned[0].value.value
    assert "__version__ = " not in (ROOT / "tapejit" / "__init__.py").read_text()


def test_the_license_is_mit_as_pyproject_says():
    toml = pyproject()
    text = (ROOT / "LICENSE").read_text()
    assert text.startswith("MIT License") and "Copyright (c) tapejit developers" in text
    assert toml["project"]["license"] == "MIT" and toml["project"]["license-files"] == ["LICENSE"]


def test_the_numba_range_is_the_one_tested_and_installed():
    toml = pyproject()
    from packaging.requirements import Requirement
    (numba_req,) = [Requirement(r) for r in toml["project"]["dependencies"] if r.startswith("numba")]
    assert numba_req.specifier == Requirement(_numba_load.TESTED_NUMBA).specifier   # what warnings name
    assert numba_req.specifier.contains(numba.__version__), numba.__version__
    assert any(r.startswith("threadpoolctl") for r in toml["project"]["dependencies"])


@pytest.mark.slow
def test_the_wheel_holds_the_license_the_plugin_and_the_version(tmp_path):
    source = tmp_path / "source"        # setuptools writes build/ and *.egg-info beside the sources
    shutil.copytree(ROOT, source, ignore=shutil.ignore_patterns(".git", ".venv", "__pycache__", "build", "dist",
                                                                 "*.egg-info", ".pytest_cache", ".benchmarks"))
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", str(source), "--no-deps", "-q", "-w", str(tmp_path)],
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    (wheel,) = tmp_path.glob("tapejit-*.whl")
    assert wheel.name.startswith(f"tapejit-{tapejit.__version__}-")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        info = f"tapejit-{tapejit.__version__}.dist-info"
        assert f"{info}/licenses/LICENSE" in names
        assert "pytest_tapejit.py" in names and "tapejit/_version.py" in names
        assert "tapejit/__init__.pyi" in names and "tapejit/py.typed" in names   # editors see tj.exp
        assert "[pytest11]\ntapejit = pytest_tapejit" in z.read(f"{info}/entry_points.txt").decode()
        metadata = z.read(f"{info}/METADATA").decode()
    assert "License-Expression: MIT" in metadata and "Requires-Dist: threadpoolctl" in metadata
    assert not any("_sweeps" in n or n.endswith((".nbi", ".nbc")) for n in names)


# ---- Numba's internals: the light loader falls back --------------------------------------

def _double(x):
    return x * 2.0


def test_a_light_load_that_fails_falls_back_to_numbas_own_load(tmp_path, monkeypatch):
    """Another Numba whose cache lacks an internal the light load uses (an AttributeError):
    Numba's own load runs instead, without a warning."""
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(config, "CACHE_DIR", "")
    monkeypatch.setattr(_numba_load, "_warned", set())
    cache = _jit.sweep(_double)._cache
    assert type(cache) is _numba_load.SweepCache
    loaded = object()

    def light(sig, target_context):
        raise AttributeError("'IndexDataCacheFile' object has no attribute '_load_index'")

    monkeypatch.setattr(_numba_load.rtsys, "initialize", lambda ctx: None)
    monkeypatch.setattr(cache, "_load_overload", light)
    monkeypatch.setattr(_numba_load.FunctionCache, "load_overload", lambda self, sig, ctx: loaded)
    with _no_warnings():
        assert cache.load_overload((), None) is loaded


def test_another_numbas_cache_layout_is_not_cached_with_a_warning(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(_numba_load, "_warned", set())

    def changed(self, py_func):
        raise AttributeError("'FunctionCache' object has no attribute '_cache_file'")

    monkeypatch.setattr(_numba_load.SweepCache, "__init__", changed)
    with pytest.warns(UserWarning, match=rf"not cached on disk .*_cache_file.*Numba {numba.__version__}"
                                         r".*numba>=0\.68,<0\.69"):
        f = _jit.sweep(_double)
    assert type(f._cache) is not _numba_load.SweepCache
    assert f(np.ones(2)).tolist() == [2.0, 2.0]


def test_numba_without_the_cache_internals_imports_with_one_warning(tmp_path):
    """An ImportError of Numba's cache classes (another Numba's layout): tapejit imports,
    computes uncached, and says once which Numba it is tested with."""
    script = textwrap.dedent("""
        import numba.core.caching
        del numba.core.caching.IndexDataCacheFile
        import tapejit as tj
        from tapejit import _numba_load
        print("missing", type(_numba_load._MISSING_INTERNALS).__name__)
        print("values", tj.tensor([1.0, 2.0]).tolist())
    """)
    out = run(["-c", script], cache=tmp_path / "cache")
    assert "missing ImportError" in out.stdout and "values [1.0, 2.0]" in out.stdout
    assert out.stderr.count("compiled code is not cached on disk") == 1
    assert f"Numba {numba.__version__} lacks the internals" in out.stderr
    assert "numba>=0.68,<0.69" in out.stderr


class _no_warnings:
    def __enter__(self):
        import warnings
        self.catcher = warnings.catch_warnings()
        self.catcher.__enter__()
        warnings.simplefilter("error")

    def __exit__(self, *exc):
        self.catcher.__exit__(*exc)


# ---- BLAS threads through threadpoolctl --------------------------------------------------

def _blas_threads():
    from threadpoolctl import threadpool_info
    return {info["filepath"]: info["num_threads"] for info in threadpool_info() if info["user_api"] == "blas"}


def test_blas_follows_set_num_threads():
    _numba_load.ensure_blas()      # SciPy's BLAS, which the products call, is loaded
    before = tj.get_num_threads()
    try:
        for n in (1, 2, 1):
            tj.set_num_threads(n)
            assert tj.get_num_threads() == n
            threads = _blas_threads()
            assert threads and set(threads.values()) == {n}, threads
            assert any("scipy" in path for path in threads), threads
    finally:
        tj.set_num_threads(before)


def test_blas_loaded_after_set_num_threads_follows_it(tmp_path):
    """A script sets its threads first; SciPy's BLAS is loaded later, with the linalg
    sweeps (``_numba_load.ensure_blas``): it gets the count then."""
    script = textwrap.dedent("""
        import sys
        import tapejit as tj
        assert "scipy.linalg.cython_blas" not in sys.modules
        tj.set_num_threads(1)
        from tapejit import _numba_load
        _numba_load.ensure_blas()
        from threadpoolctl import threadpool_info
        print(sorted((i["filepath"].split("/")[-1], i["num_threads"]) for i in threadpool_info()
                     if i["user_api"] == "blas"))
    """)
    out = run(["-c", script], OMP_NUM_THREADS="", OPENBLAS_NUM_THREADS="")
    found = ast.literal_eval(out.stdout.strip())
    assert any("scipy_openblas" in name for name, _ in found), found
    assert {n for _, n in found} == {1}, found


def test_set_num_threads_costs_little():
    """It is called in benchmarks' set-up: the controller of threadpoolctl is made once."""
    _numba_load.ensure_blas()
    before = tj.get_num_threads()
    try:
        tj.set_num_threads(1)
        start = time.perf_counter()
        for _ in range(200):
            tj.set_num_threads(2)
            tj.set_num_threads(1)
        per_call = (time.perf_counter() - start) / 400
    finally:
        tj.set_num_threads(before)
    assert per_call < 1e-3, f"{per_call * 1e6:.0f} us per call"


# ---- a read-only install -------------------------------------------------------------------

def _read_only_copy(tmp_path):
    package = tmp_path / "site" / "tapejit"
    shutil.copytree(Path(tapejit.__file__).parent, package, ignore=shutil.ignore_patterns("__pycache__", "_sweeps"))
    for path in [package, *package.rglob("*")]:
        path.chmod(0o555 if path.is_dir() else 0o444)
    return package


def _writable_again(package):
    for path in [package, *package.rglob("*")]:
        path.chmod(0o755 if path.is_dir() else 0o644)


@posix_only
@pytest.mark.slow
def test_a_read_only_install_caches_in_its_cache_folder(tmp_path):
    """The package folder cannot be written (as in a system site-packages): the sweeps are
    generated and cached in the cache folder, the package is left as it was, and a second
    process loads them without compiling."""
    package = _read_only_copy(tmp_path)
    before = sorted((p.relative_to(package), p.stat().st_mode) for p in package.rglob("*"))
    cache = tmp_path / "cache"
    try:
        program = LOGGED + "print('from', tj.__file__)\n"
        first = run(["-c", program], cache=cache, PYTHONPATH=package.parent)
        second = run(["-c", program], cache=cache, PYTHONPATH=package.parent)
    finally:
        after = sorted((p.relative_to(package), p.stat().st_mode) for p in package.rglob("*"))
        _writable_again(package)
    assert after == before
    for out in (first, second):
        assert "grad [2.0, 4.0]" in out.stdout
        assert f"from {package / '__init__.py'}" in out.stdout
        assert "Warning" not in out.stderr, out.stderr
    assert COMPILING in first.stderr and COMPILING not in second.stderr
    assert (cache / "sweep_arith.py").exists() and list((cache / "__pycache__").glob("*.nbc"))


# ---- the compile log line ------------------------------------------------------------------

def test_a_compile_logs_why_it_waits_and_a_cached_load_does_not(tmp_path, monkeypatch, caplog):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(config, "CACHE_DIR", "")
    caplog.set_level(logging.INFO, logger="tapejit")
    _jit.sweep(_double)(np.ones(2, np.float32))
    messages = [r.getMessage() for r in caplog.records if r.name == "tapejit"]
    assert len(messages) == 2, messages
    assert re.fullmatch(r"compiling test_packaging\._double \(float32\): not in the compiled-code cache yet "
                        r"\(first use on this install, or tapejit changed\); cached afterwards", messages[0])
    assert re.fullmatch(r"compiled test_packaging\._double \(float32\) in \d+\.\d s", messages[1])
    assert all(r.levelno == logging.INFO for r in caplog.records if r.name == "tapejit")
    caplog.clear()
    _jit.sweep(_double)(np.ones(2, np.float32))      # another process would load it, as this
    assert not [r for r in caplog.records if r.name == "tapejit"]


@pytest.mark.slow
def test_a_first_gradient_logs_its_compile_with_ops_dtype_and_time(tmp_path):
    """A first gradient says what it compiles (each op's sweep, the entry points), why and
    for how long; the second process compiles nothing."""
    first = run(["-c", LOGGED], cache=tmp_path / "cache")
    assert "grad [2.0, 4.0]" in first.stdout
    why = "not in the compiled-code cache yet (first use on this install, or tapejit changed); cached afterwards"
    # float32: the default dtype, as torch's
    for what in ("the forward sweep of op mul (op group arith)", "the backward sweep of op mul (op group arith)",
                 "the forward sweep of op sum (op group sum)", "the sweeps' entry point backward"):
        assert f"tapejit INFO compiling {what} (float32): {why}" in first.stderr, first.stderr
        assert re.search(rf"tapejit INFO compiled {re.escape(what)} \(float32\) in \d+\.\d s", first.stderr)
    assert "float64" not in first.stderr
    second = run(["-c", LOGGED], cache=tmp_path / "cache")
    assert "grad [2.0, 4.0]" in second.stdout and "tapejit INFO" not in second.stderr


# ---- python -m tapejit ---------------------------------------------------------------------

def test_help_lists_the_commands():
    out = tapejit_cli("--help")
    for text in ("warmup", "cache info", "cache clear", "stub", "With no command: the seed example"):
        assert text in out.stdout


def test_warmup_reports_each_step_with_its_groups_dtype_and_time(capsys):
    """In the suite's process (every op's sweeps, compiled by the suite): loads."""
    assert _cli.main(["warmup", "--groups", "arith", "--dtypes", "float64", "--jobs", "1"]) == 0
    err = capsys.readouterr().err
    lines = err.splitlines()
    steps = [line for line in lines if line.startswith("[")]
    assert len(steps) == len(precompile.steps(["arith"], ["float64"])) + 1 == 5
    assert re.fullmatch(r"\[\.{24}\] 0/4  batched replay by rows \(float64\)  0:\d\d", steps[0])
    assert re.fullmatch(r"\[#{24}\] 4/4  done  \d+:\d\d", steps[-1])
    assert "float32" not in err
    assert re.search(r"compiled or loaded 4 steps in \d+\.\d s; cache: ", lines[-1])


def test_warmup_refuses_unknown_groups_and_dtypes(capsys):
    assert _cli.main(["warmup", "--groups", "arith,nope"]) == 2
    assert "unknown op group(s) nope; the groups are arith, math" in capsys.readouterr().err
    assert _cli.main(["warmup", "--dtypes", "int64"]) == 2
    assert _cli.main(["warmup", "--jobs", "0"]) == 2
    assert "float dtypes (float64, float32)" in capsys.readouterr().err


def test_precompile_covers_every_group_and_both_dtypes():
    labels = [label for label, _ in precompile.steps()]
    for dtype in ("float64", "float32"):
        for group in registry.GROUPS:
            assert f"op group {group} ({dtype})" in labels
        assert f"entry points ({dtype})" in labels and f"batched replay by rows ({dtype})" in labels
    assert labels[-1].startswith("graph walks")
    assert len(labels) == 2 * len(registry.GROUPS) + 5


def _fill(cache):
    """A cache folder as tapejit leaves it, without compiling: the generated module for
    arith (its text and record), a Numba entry beside it, one of tapejit's own and a trace's
    tier-2 function."""
    out = run(["-c", "from tapejit import codegen; codegen.load_module('arith')"], cache=cache)
    assert out.returncode == 0
    (cache / "__pycache__" / "sweep_arith.forward_add-25.py311.nbi").write_bytes(b"index")
    (cache / "__pycache__" / "sweep_arith.forward_add-25.py311.1.nbc").write_bytes(b"x" * 1000)
    (cache / "rows.py").write_text("# batched replay's module (replay/rows.py)")
    (cache / "__pycache__" / "rows.replay_rows-80.py311.nbi").write_bytes(b"index")
    own = cache / "numba" / "tapejit_0123"
    own.mkdir(parents=True)
    (own / "tape._earliest_reached-727.py311.1.nbc").write_bytes(b"x")
    (cache / "tier2").mkdir()
    (cache / "tier2" / "t2_0123.py").write_text("# a trace's tier-2 function (replay/fused.py)")


def test_cache_info_says_where_what_and_which_numba(tmp_path):
    cache = tmp_path / "cache"
    empty = tapejit_cli("cache", "info", cache=cache)
    assert f"cache folder: {cache} (0.0 MB)\nsweeps: none yet\n" in empty.stdout    # import made it
    assert f"tapejit {tapejit.__version__}, Numba {numba.__version__} (tested with numba>=0.68,<0.69)" in empty.stdout
    _fill(cache)
    out = tapejit_cli("cache", "info", cache=cache).stdout
    assert re.search(rf"cache folder: {re.escape(str(cache))} \(\d+\.\d MB\)", out)
    assert "  arith\n    1 compiled entries: forward_add x1" in out
    assert "tier 2 (tj.compile): 1 traces' fused functions" in out
    assert "tapejit's other compiled functions: tape._earliest_reached x1" in out
    (cache / "sweep_arith.sha256").write_text("0123456789abcdef 00\n")
    assert "arith  (stale: another tapejit's ops; compiled again on use)" in tapejit_cli("cache", "info", cache=cache).stdout


def test_cache_clear_asks_first_and_deletes_only_tapejits_files(tmp_path):
    cache = tmp_path / "cache"
    _fill(cache)
    (cache / "notes.txt").write_text("the user's")      # TAPEJIT_CACHE_DIR may hold other files
    kept = tapejit_cli("cache", "clear", cache=cache, input="n\n", check=False)
    assert kept.returncode == 1 and "[y/N]" in kept.stdout and "kept it" in kept.stdout
    assert (cache / "sweep_arith.py").exists()
    no_terminal = tapejit_cli("cache", "clear", cache=cache, input="", check=False)
    assert no_terminal.returncode == 1 and (cache / "sweep_arith.py").exists()
    cleared = tapejit_cli("cache", "clear", cache=cache, input="y\n")
    assert f"deleted tapejit's compiled code in {cache}" in cleared.stdout
    assert sorted(p.name for p in cache.iterdir()) == ["notes.txt"]
    (cache / "notes.txt").unlink()
    _fill(cache)
    assert "deleted" in tapejit_cli("cache", "clear", "--yes", cache=cache).stdout
    assert not cache.exists()
    assert "nothing to clear" in tapejit_cli("cache", "clear", "--yes", cache=cache).stdout


@pytest.mark.slow
def test_warmup_of_one_group_compiles_every_path_a_program_takes(tmp_path):
    """After ``warmup --groups arith --jobs 2`` (a fresh cache, two processes compiling), a
    program using arith on every path (eager, chunked runs, replay, batched replay; float64
    and float32) compiles nothing."""
    cache = tmp_path / "cache"
    warm = tapejit_cli("warmup", "--groups", "arith", "--jobs", "2", cache=cache)
    assert "7 steps in 2 processes" in warm.stderr
    assert "7/7  done" in warm.stderr
    files = sorted(p.relative_to(cache) for p in cache.rglob("*"))
    out = run(["-c", EVERY_PATH], cache=cache)
    assert "every path ok" in out.stdout
    assert COMPILING not in out.stderr, out.stderr
    assert sorted(p.relative_to(cache) for p in cache.rglob("*")) == files


@pytest.mark.slow
def test_warmup_of_every_group(tmp_path):
    """Every op group for both dtypes, into the suite's cache; then a program of every path
    compiles nothing."""
    warm = tapejit_cli("warmup")
    for dtype in ("float64", "float32"):
        assert f"op group decomp ({dtype})" in warm.stderr and f"entry points ({dtype})" in warm.stderr
    steps = len(precompile.steps())
    assert f"{steps}/{steps}  done" in warm.stderr
    out = run(["-c", EVERY_PATH])
    assert "every path ok" in out.stdout and COMPILING not in out.stderr, out.stderr
    assert "  decomp\n" in tapejit_cli("cache", "info").stdout


# ---- the pytest plugin -------------------------------------------------------------------

@pytest.fixture
def plugin_run(pytester, monkeypatch):
    """Runs pytest in a subprocess with tapejit's plugin (named with -p: entry points are
    not loaded, so an installed copy does not register it twice), on the suite's cache
    (pytester gives it a HOME of its own, where the default cache would be empty)."""
    monkeypatch.setenv("PYTEST_DISABLE_PLUGIN_AUTOLOAD", "1")
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", _numba_load.cache_dir())

    def run_plugin(*args):
        return pytester.runpytest_subprocess("-p", "pytest_tapejit", "-p", "no:cacheprovider", *args)
    return run_plugin


WARM_TEST = textwrap.dedent("""
    import logging

    from threadpoolctl import threadpool_info

    def test_warm(tapejit_warm, caplog):
        tj = tapejit_warm
        assert tj.get_num_threads() == {threads}
        blas = [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]
        assert blas and set(blas) == {{{threads}}}, blas
        caplog.set_level(logging.INFO, logger="tapejit")
        x = tj.tensor([1.0, 2.0], requires_grad=True)
        (x * x).backward(tj.ones(2))
        y = tj.tensor([1.0, 2.0], dtype=tj.float32, requires_grad=True)
        (y * y).backward(tj.ones(2, dtype=tj.float32))
        assert x.grad.tolist() == y.grad.tolist() == [2.0, 4.0]
        compiled = [r.getMessage() for r in caplog.records if r.name == "tapejit"]
        assert not compiled, compiled

    def test_once_per_run(tapejit_warm):
        assert tapejit_warm is tapejit and len(calls) == 1
""")

# Counts the fixture's compiles ahead (imported at collection, before the fixture runs).
COUNTING = textwrap.dedent("""
    import tapejit
    from tapejit import precompile

    calls = []
    _precompile = precompile.precompile
    precompile.precompile = lambda *a, **k: calls.append(a) or _precompile(*a, **k)
""")


@pytest.mark.slow   # compiles the arith group and the row module for float32 too
def test_the_fixture_compiles_ahead_and_pins_one_thread(plugin_run, pytester):
    pytester.makeini("[pytest]\ntapejit_groups = arith\n")
    pytester.makepyfile(COUNTING + WARM_TEST.format(threads=1))
    plugin_run().assert_outcomes(passed=2)


@pytest.mark.slow   # compiles the arith group and the row module for float32 too
def test_the_fixture_takes_its_threads_from_the_command_line(plugin_run, pytester):
    pytester.makeini("[pytest]\ntapejit_groups = arith\ntapejit_threads = 3\n")
    pytester.makepyfile(COUNTING + WARM_TEST.format(threads=2))
    plugin_run("--tapejit-threads", "2").assert_outcomes(passed=2)


def test_the_fixture_refuses_a_bad_thread_count(plugin_run, pytester):
    pytester.makepyfile("def test_warm(tapejit_warm):\n    pass\n")
    result = plugin_run("--tapejit-threads", "0")
    result.assert_outcomes(errors=1)
    result.stdout.fnmatch_lines(["*--tapejit-threads expects a positive integer, got 0*"])


def test_the_plugin_does_not_import_tapejit_for_tests_that_do_not_ask(plugin_run, pytester):
    pytester.makepyfile("import sys\n\ndef test_plain():\n    assert 'tapejit' not in sys.modules\n")
    result = plugin_run("--tapejit-threads", "2")
    result.assert_outcomes(passed=1)
    assert "--tapejit-threads=N" in plugin_run("--help").stdout.str()


def test_the_plugin_is_an_entry_point_outside_the_package():
    toml = pyproject()
    assert toml["project"]["entry-points"]["pytest11"] == {"tapejit": "pytest_tapejit"}
    assert "pytest_tapejit" in toml["tool"]["setuptools"]["py-modules"]
    assert (ROOT / "pytest_tapejit.py").exists()
