"""The generated sweep is derived from the registry and can never be stale."""
import inspect
import os
import re
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import tapejit
from tapejit import codegen, registry
from tapejit.ops import _blas, _kernel_helpers, unary


EVERYTHING = codegen.group_mask(registry.GROUPS)


def test_generated_sweep_is_current():
    module = codegen.load_sweeps(EVERYTHING)
    text = Path(module.__file__).read_text()
    assert module.REGISTRY_HASH == registry.registry_hash()
    assert text == codegen.generate_source(codegen.ops_in(EVERYTHING))


def test_every_op_is_dispatched_in_its_group():
    for group in registry.GROUPS:
        text = codegen.generate_source(codegen.ops_in(codegen.group_mask([group])))
        for op in registry.OPS:
            if op.kind in ("unary", "binary", "kernel"):
                # ops running the same kernel share one branch: "if op == 3 or op == 17:  # a, b"
                dispatched = re.search(rf"\bop == {op.opcode}\b(?= or |:  #)", text) is not None
                assert dispatched == (op.group == group), (group, op.name)


def test_saved_table_is_indexed_by_opcode_in_every_group_sweep():
    import numpy as np
    expected = [1 if op.saves else 0 for op in registry.OPS]
    for group in registry.GROUPS:
        text = codegen.generate_source(codegen.ops_in(codegen.group_mask([group])))
        line = next(line for line in text.splitlines() if line.startswith("SAVES = "))
        assert eval(line.split("=", 1)[1], {"np": np}).tolist() == expected, group


def test_freed_graph_error_with_only_the_groups_a_program_uses(tmp_path):
    """Outside the test session's all-groups sweep: a partial sweep reads SAVES correctly."""
    script = textwrap.dedent("""
        import tapejit as tj
        x = tj.tensor([1.0, 2.0], requires_grad=True)
        y = (x * x).sum()
        y.backward()
        try:
            y.backward()
        except RuntimeError as e:
            print("raised", "second time" in str(e))
        z = (x + 1.0).sum()      # AddBackward0 saves nothing: a second backward is fine
        z.backward()
        z.backward()
        print("grad", x.grad.tolist())
    """)
    env = dict(os.environ)
    env.pop("TAPEJIT_SWEEP_GROUPS", None)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True,
                         timeout=900, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "raised True" in out.stdout
    assert "grad [4.0, 6.0]" in out.stdout


def _edited_exp_grad(x, y, g, c0, c1):
    return g * y * 2.0


def _edited_tanh(x):
    return lambda x: np.tanh(x) * 2.0


def test_hash_changes_with_a_rule_body(monkeypatch):
    before = registry.registry_hash()
    monkeypatch.setattr(unary.exp_grad, "__code__", _edited_exp_grad.__code__)
    assert registry.registry_hash() != before


def test_hash_changes_with_an_overloaded_helper(monkeypatch):
    before = registry.registry_hash()
    monkeypatch.setattr(_kernel_helpers._tanh_compiled, "__code__", _edited_tanh.__code__)
    assert registry.registry_hash() != before


def test_hash_changes_with_a_constant_a_kernel_reads(monkeypatch):
    before = registry.registry_hash()
    monkeypatch.setattr(_blas, "_T", 85)        # matmul_into's transpose flag
    assert registry.registry_hash() != before


def test_hash_changes_with_an_op_table_entry(monkeypatch):
    before = registry.registry_hash()
    monkeypatch.setattr(registry.BY_NAME["exp"], "saves", False)
    assert registry.registry_hash() != before


def test_hash_ignores_python_outside_the_sweeps(monkeypatch):
    """Front ends, samples and new plain functions in an op module never run in a sweep:
    editing them must not recompile anything."""
    before = registry.registry_hash()
    monkeypatch.setattr(unary, "a_new_front_end", lambda x: x, raising=False)
    front_end = next(v for k, v in vars(unary).items()
                     if inspect.isfunction(v) and not hasattr(v, "py_func") and v.__module__ == unary.__name__)
    monkeypatch.setattr(front_end, "__code__", (lambda *a, **k: None).__code__)
    # nor the derivative formulas (create_graph), stored on the op beside its compiled parts
    monkeypatch.setattr(unary._d_exp, "__code__", (lambda c: None).__code__)
    monkeypatch.delattr(registry.BY_NAME["sqrt"], "formula")
    assert registry.registry_hash() == before


def test_hash_ignores_an_ops_names(monkeypatch):
    """Renaming an op's front ends (``tj.log1p`` -> ``tj.log_one_plus``, a new NumPy name, no
    in-place variant) changes no compiled code: no recompile; the same entry's rule does."""
    before = registry.registry_hash()
    log1p = registry.BY_NAME["log1p"]
    monkeypatch.setattr(log1p, "names", registry.names("log_one_plus", numpy=("log1p", "log"), in_place=""))
    assert registry.registry_hash() == before
    monkeypatch.setattr(log1p, "names", None)
    assert registry.registry_hash() == before
    monkeypatch.setattr(unary.log1p_grad, "__code__", _edited_exp_grad.__code__)
    assert registry.registry_hash() != before


def test_regenerates_only_when_text_changes(tmp_path, monkeypatch):
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    arith = codegen.group_mask(["arith"])
    digest = registry.registry_hash()
    stale = tmp_path / "sweep_arith.py"
    stale.write_text('REGISTRY_HASH = "0000"\n')
    path = codegen._current_file("sweep_arith", arith, digest)
    assert path == stale and stale.read_text() == codegen.generate_source(codegen.ops_in(arith))
    assert codegen._recorded_hash(stale, tmp_path / "sweep_arith.sha256") == digest
    mtime = stale.stat().st_mtime_ns
    (tmp_path / "sweep_arith.sha256").unlink()
    codegen._current_file("sweep_arith", arith, digest)  # same text: the file, and so its caches, kept
    assert stale.stat().st_mtime_ns == mtime


@pytest.mark.slow
def test_edited_kernel_is_recompiled(tmp_path):
    """End to end: compile and cache, edit a derivative rule, run again in a new process."""
    work = tmp_path / "copy"
    shutil.copytree(Path(tapejit.__file__).parent, work / "tapejit",
                    ignore=shutil.ignore_patterns("__pycache__"))
    script = textwrap.dedent("""
        import tapejit as tj
        x = tj.tensor([0.5], dtype=tj.float64, requires_grad=True)
        x.exp().sum().backward()
        print(repr(x.grad.item()))
    """)
    env = dict(os.environ, PYTHONPATH=str(work), NUMBA_CACHE_DIR=str(tmp_path / "cache"),
               TAPEJIT_CACHE_DIR=str(tmp_path / "sweeps"))
    env.pop("TAPEJIT_SWEEP_GROUPS", None)

    def run():
        out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                             text=True, timeout=1200, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
        return float(out.stdout.strip().splitlines()[-1])

    first = run()
    unary_file = work / "tapejit" / "ops" / "unary.py"
    text = unary_file.read_text()
    edited = text.replace("def exp_grad(x, y, g, c0, c1):\n    return g * y\n",
                          "def exp_grad(x, y, g, c0, c1):\n    return g * y * 3.0\n")
    assert edited != text
    unary_file.write_text(edited)
    assert run() == pytest.approx(3.0 * first)


def test_bytecode_is_written_when_python_would_not(tmp_path, monkeypatch):
    """Under ``PYTHONDONTWRITEBYTECODE`` the generated module still gets its ``.pyc``, so a
    start does not compile its source again; importing it compiles nothing in Numba."""
    import importlib.util
    import sys
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(codegen, "_modules", {})
    mask = codegen.group_mask(["arith"])
    module = codegen.load_sweeps(mask)
    cached = Path(importlib.util.cache_from_source(module.__file__))
    assert Path(module.__file__).parent == tmp_path and cached.exists()
    assert cached.stat().st_mtime >= Path(module.__file__).stat().st_mtime


def test_cached_sweeps_load_without_numbas_compiler_set_up(tmp_path):
    """A process whose sweeps are all cached never sets up Numba's compiler
    (tapejit/_numba_load.py): an elementwise program imports neither Numba's array maths nor
    ``scipy.linalg``.  Compiling something new afterwards still works, and so does a matrix
    product, which runs Numba's BLAS check first."""
    script = textwrap.dedent("""
        import sys
        import numpy as np
        import numba
        import tapejit as tj
        x = tj.tensor([1.0, 2.0], requires_grad=True)
        (x * x).sum().backward()
        print("elementwise", "numba.np.arraymath" in sys.modules, "scipy.linalg" in sys.modules,
              x.grad.tolist())
        fresh = numba.njit(lambda a: np.exp(a).sum())   # compiled here: the usual set-up
        print("compiled", fresh(np.zeros(3)), "numba.np.arraymath" in sys.modules)
        w = tj.tensor([[1.0, 2.0], [3.0, 4.0]], requires_grad=True)
        (w @ x.detach()).sum().backward()
        print("product", "scipy.linalg.cython_blas" in sys.modules, w.grad.tolist())
    """)
    runs = []
    for groups in (None, "all"):   # the groups a program uses, then every group
        env = dict(os.environ)
        env.pop("TAPEJIT_SWEEP_GROUPS", None)
        if groups:
            env["TAPEJIT_SWEEP_GROUPS"] = groups
        for _ in range(2):         # the second run finds every sweep cached
            out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                                 text=True, timeout=900, cwd=tmp_path)
            assert out.returncode == 0, out.stderr
        runs.append(out.stdout)
    assert "elementwise False False [2.0, 4.0]" in runs[0]
    assert "elementwise False True [2.0, 4.0]" in runs[1]   # the all-groups sweep holds products
    for run in runs:
        assert "compiled 3.0 True" in run
        assert "product True [[1.0, 2.0], [1.0, 2.0]]" in run


def test_a_failed_light_load_is_retried_with_numbas_set_up(monkeypatch):
    """``SweepCache`` skips the target's refresh; if its load fails anyway, the load is
    retried Numba's usual way (refresh, then load), and that result is returned."""
    from tapejit import _jit, _numba_load

    dispatcher = _jit.sweep(_sweep_fixture)
    cache = dispatcher._cache
    assert type(cache) is _numba_load.SweepCache

    calls = []

    class Target:
        def refresh(self):
            calls.append("refresh")

    def load(sig, target_context):
        calls.append("load")
        if calls.count("load") == 1:
            raise OSError("unreadable cache entry")
        return "rebuilt"

    monkeypatch.setattr(_numba_load.rtsys, "initialize", lambda ctx: calls.append("nrt"))
    monkeypatch.setattr(cache, "_load_overload", load)
    assert cache.load_overload((), Target()) == "rebuilt"
    assert calls == ["nrt", "load", "refresh", "load"]


def _sweep_fixture(x):
    return x + 1
