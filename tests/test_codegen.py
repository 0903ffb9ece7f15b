"""The generated sweeps are derived from the registry, can never be stale, and compile per op."""
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
import tapejit as tj
from tapejit import codegen, registry
from tapejit.ops import _blas, _kernel_helpers, unary


def test_generated_modules_are_current():
    for group in [None, *registry.GROUPS]:
        module = codegen.load_module(group)
        text = Path(module.__file__).read_text()
        assert module.REGISTRY_HASH == registry.registry_hash()
        assert text == (codegen.entry_source() if group is None else codegen.group_source(group))


def test_every_op_has_one_compile_unit_per_kind_in_its_group():
    for group in registry.GROUPS:
        text = codegen.group_source(group)
        for kind, name in enumerate(codegen.KINDS):
            units = codegen.units(group, kind)
            seen = [op for _, ops in units for op in ops]
            assert len(seen) == len({op.name for op in seen}), (group, name)
            for op in registry.OPS:
                in_sweeps = op.kind in ("unary", "binary", "kernel") and (
                    kind != codegen.ELEMENTWISE or registry.in_chunked_runs(op))
                assert (op in seen) == (op.group == group and in_sweeps), (group, name, op.name)
            for unit, ops in units:
                # ops running one kernel share one unit: "def forward_reshape(fp, r, hi, z):  # reshape, ..."
                header = re.search(rf"^def {unit}\(fp, r, (hi|lo), z\):  # (.*)$", text, re.M)
                assert header and header.group(2) == ", ".join(op.name for op in ops), unit
                if len(ops) > 1:
                    kernels = {op.forward if kind == codegen.FORWARD else op.backward for op in ops}
                    assert len(kernels) == 1, unit


def test_saved_table_is_indexed_by_opcode_in_every_group_module():
    expected = [1 if op.saves else 0 for op in registry.OPS]
    for group in registry.GROUPS:
        text = codegen.group_source(group)
        line = next(line for line in text.splitlines() if line.startswith("SAVES = "))
        assert eval(line.split("=", 1)[1], {"np": np}).tolist() == expected, group


def test_freed_graph_error_in_a_fresh_process(tmp_path):
    """A process of its own (its own op sweeps loaded on demand) reads SAVES correctly."""
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
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
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
    digest = registry.registry_hash()
    stale = tmp_path / "sweep_arith.py"
    stale.write_text('REGISTRY_HASH = "0000"\n')
    path = codegen._current_file("sweep_arith", lambda: codegen.group_source("arith", digest), digest)
    assert path == stale and stale.read_text() == codegen.group_source("arith")
    assert codegen._recorded_hash(stale, tmp_path / "sweep_arith.sha256") == digest
    mtime = stale.stat().st_mtime_ns
    (tmp_path / "sweep_arith.sha256").unlink()
    codegen._current_file("sweep_arith", lambda: codegen.group_source("arith", digest), digest)
    assert stale.stat().st_mtime_ns == mtime     # same text: the file, and so its caches, kept


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
    monkeypatch.setenv("TAPEJIT_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(sys, "dont_write_bytecode", True)
    monkeypatch.setattr(codegen, "_modules", {})
    module = codegen.load_module("arith")
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
    for _ in range(2):         # the second run finds every sweep cached
        out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                             timeout=900, cwd=tmp_path)
        assert out.returncode == 0, out.stderr
    assert "elementwise False False [2.0, 4.0]" in out.stdout
    assert "compiled 3.0 True" in out.stdout
    assert "product True [[1.0, 2.0], [1.0, 2.0]]" in out.stdout


# Prints what Numba compiled while ``PROGRAM`` ran: the generated op sweeps and entry points
# (modules sweep_<group> and sweeps), each with its arena dtype.
COMPILES = textwrap.dedent("""
    from numba.core import event
    compiled = set()

    class Listener(event.Listener):
        def on_start(self, e):
            fn = e.data["dispatcher"].py_func
            module = fn.__module__.rsplit(".", 1)[-1]
            if module == "sweeps" or module.startswith("sweep_"):
                kind = "f32" if "float32" in str(e.data["args"]) else "f64"
                compiled.add(f"{module}.{fn.__name__}[{kind}]")

        def on_end(self, e):
            pass

    event.register("numba:compile", Listener())
    import tapejit as tj
    PROGRAM
    print("compiled", sorted(compiled))
""")


def _compiled(program, cache):
    script = COMPILES.replace("PROGRAM", textwrap.dedent(program).strip())
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=900,
                         env=dict(os.environ, TAPEJIT_CACHE_DIR=str(cache)), cwd=cache.parent)
    assert out.returncode == 0, out.stderr
    return set(eval(out.stdout.strip().splitlines()[-1].split(" ", 1)[1]))


@pytest.mark.slow
def test_a_first_gradient_compiles_only_its_ops_kinds_and_dtype(tmp_path):
    """The compile units: a program compiles the forward and backward sweeps of the ops its
    tape holds, for its dtype, and two small entry points; the chunked runs' and replay's
    entry points wait for their first use.  A second program that meets a new op (of a
    group the first never used) compiles that op's sweeps and nothing else: what the first
    compiled is loaded from the cache.  Run again, nothing compiles."""
    cache = tmp_path / "cache"
    first = """
        x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
        (x * x).sum().backward()
        assert x.grad.tolist() == [2.0, 4.0]
    """
    assert _compiled(first, cache) == {
        "sweeps.forward[f64]", "sweeps.backward[f64]",
        "sweep_arith.forward_mul[f64]", "sweep_arith.backward_mul[f64]",
        "sweep_sum.forward_sum[f64]", "sweep_sum.backward_sum[f64]"}
    second = """
        x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
        (x * x).exp().sum().backward()
    """
    assert _compiled(second, cache) == {"sweep_math.forward_exp[f64]", "sweep_math.backward_exp[f64]"}
    assert _compiled(first + second, cache) == set()
    single = """
        x = tj.tensor([1.0, 2.0], dtype=tj.float32, requires_grad=True)
        (x * x).sum().backward()
    """
    assert _compiled(single, cache) == {
        "sweeps.forward[f32]", "sweeps.backward[f32]",
        "sweep_arith.forward_mul[f32]", "sweep_arith.backward_mul[f32]",
        "sweep_sum.forward_sum[f32]", "sweep_sum.backward_sum[f32]"}


def test_an_op_sweep_that_fails_to_compile_raises(monkeypatch):
    """The loader runs inside a sweep (called from compiled code): its failure cannot
    propagate as itself, so the sweep raises a RuntimeError saying which sweep failed (the
    loader's traceback is printed), and nothing runs with a missing op."""
    from tapejit.tape import sweeps
    sweeps()
    fresh = [table.copy() for table in codegen._tables]
    for table in fresh:
        table[:codegen.LOADER] = 0       # nothing loaded; the loader's row kept
    monkeypatch.setattr(codegen, "_tables", fresh)

    def broken(dispatcher, args):
        raise ValueError("a simulated compile failure")

    monkeypatch.setattr(codegen._jit, "address", broken)
    x = tj.tensor([1.0, 2.0], dtype=tj.float64, requires_grad=True)
    with pytest.raises(RuntimeError, match="compiling an op's forward sweep failed"):
        (x * 3.0).sum().backward()


def test_entry_points_refuse_arrays_they_cannot_pass_by_address():
    """An op sweep reads each array from its data address and shape, so an entry point
    given a non-contiguous array fails to compile instead of reading the wrong elements."""
    from numba.core.errors import TypingError

    from tapejit.tape import sweeps
    sw = sweeps()
    rec = np.zeros((4, 12), np.int64)[:, ::2]
    with pytest.raises(TypingError, match="not C-contiguous"):
        sw.forward(rec, 0, 4, np.zeros(8), np.zeros(1, np.int64), np.zeros(1), sw.table(0))
