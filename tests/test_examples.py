"""The scripts in examples/ run and give the documented results."""
import runpy
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_seed_examples_values():
    seed = runpy.run_path(str(EXAMPLES / "seed_examples.py"))
    assert seed["linear_squared_error"]() == (-18.0, -6.0)
    assert seed["input_without_grad"]() == (-1.0, -1.0, None)
    assert seed["accumulation"]() == ([2.0, 4.0, 6.0], [2.0, 2.0, 2.0])


def test_seed_examples_script_runs():
    out = subprocess.run([sys.executable, str(EXAMPLES / "seed_examples.py")], capture_output=True,
                         text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "-18" in out.stdout and "[2.0, 4.0, 6.0]" in out.stdout


def test_demo_runs():
    out = subprocess.run([sys.executable, "-m", "tapejit"], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "w.grad = -18" in out.stdout and "b.grad = -6" in out.stdout
    assert "AccumulateGrad" in out.stdout and "PowBackward0" in out.stdout
