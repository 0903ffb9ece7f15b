"""The scripts in examples/ run and give the documented results."""
import itertools
import runpy
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import tapejit

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_seed_examples_values():
    seed = runpy.run_path(str(EXAMPLES / "seed_examples.py"))
    assert seed["linear_squared_error"]() == (-18.0, -6.0)
    assert seed["input_without_grad"]() == (-1.0, -1.0, None)
    assert seed["accumulation"]() == ([2.0, 4.0, 6.0], [2.0, 2.0, 2.0])


def test_seed_examples_script_runs():
    out = subprocess.run([sys.executable, str(EXAMPLES / "seed_examples.py")], check=False,
                         capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "-18" in out.stdout and "[2.0, 4.0, 6.0]" in out.stdout


def test_demo_runs():
    out = subprocess.run([sys.executable, "-m", "tapejit"], check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "w.grad = -18" in out.stdout and "b.grad = -6" in out.stdout
    assert "AccumulateGrad" in out.stdout and "PowBackward0" in out.stdout


# ---- the PyTorch polynomial tutorials, on tapejit and on torch ---------------------------

TUTORIAL_STEPS = 50


def load_example(name):
    """The globals of examples/<name>.py, run as a module (its __main__ block does not run)."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"))


def polynomial_coefficients():
    """A start for the autograd tutorial's a, b, c, d, as float32 values so both libraries
    begin from exactly the same numbers."""
    return [float(v) for v in np.random.default_rng(0).standard_normal(4).astype(np.float32)]


def linear_state():
    """A start for the nn tutorials' Linear(3, 1), drawn like PyTorch's default init
    (uniform in +-1/sqrt(fan_in))."""
    rng = np.random.default_rng(1)
    bound = 1.0 / np.sqrt(3.0)
    return {"0.weight": rng.uniform(-bound, bound, (1, 3)).astype(np.float32),
            "0.bias": rng.uniform(-bound, bound, (1,)).astype(np.float32)}


TUTORIALS = [
    ("polynomial_autograd", polynomial_coefficients),
    ("polynomial_nn", linear_state),
    ("polynomial_optim", linear_state),
]


@pytest.mark.parametrize("name, initial", TUTORIALS, ids=[name for name, _ in TUTORIALS])
def test_tutorial_loss_decreases_every_step(name, initial):
    losses = load_example(name)["train"](tapejit, TUTORIAL_STEPS, initial())
    assert len(losses) == TUTORIAL_STEPS
    assert all(np.isfinite(losses))
    assert all(later < earlier for earlier, later in itertools.pairwise(losses))
    assert losses[-1] < 0.6 * losses[0]


@pytest.mark.parametrize("name, initial", TUTORIALS, ids=[name for name, _ in TUTORIALS])
def test_tutorial_matches_torch_from_the_same_start(name, initial):
    torch = pytest.importorskip("torch")
    train = load_example(name)["train"]
    start = initial()
    tapejit_losses = train(tapejit, TUTORIAL_STEPS, start)
    torch_losses = train(torch, TUTORIAL_STEPS, start)
    # float32 in both; the sums over 2000 points may be ordered differently
    np.testing.assert_allclose(tapejit_losses, torch_losses, rtol=1e-4)


def test_tutorial_with_random_start_runs_as_written():
    """No start given: the tutorial's own torch.randn / nn.Linear initialisation is used."""
    for name, _ in TUTORIALS:
        losses = load_example(name)["train"](tapejit, 5)
        assert len(losses) == 5 and losses[-1] < losses[0]


def test_tutorial_device_selection_picks_the_cpu():
    torch = tapejit
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_default_device(device)
    assert device == "cpu" and torch.zeros(2, device=device).device == torch.device("cpu")


# ---- the other examples ------------------------------------------------------------------

def test_mlp_spiral_reaches_high_training_accuracy():
    example = load_example("mlp_spiral")
    features, labels = example["make_spiral"]()
    assert features.shape == (300, 2) and np.bincount(labels).tolist() == [100, 100, 100]
    history = example["train"](epochs=80, log_every=0)
    losses = [loss for loss, _ in history]
    assert losses[-1] < 0.2 * losses[0]
    assert history[-1][1] >= 0.95


def test_rosenbrock_gradient_matches_scipy():
    assert load_example("rosenbrock_lbfgs")["gradient_error"](n=100) < 1e-12


def test_rosenbrock_lbfgs_converges_to_ones():
    result, calls, seconds = load_example("rosenbrock_lbfgs")["minimise"](n=100)
    assert result.success, result.message
    assert result.fun < 1e-10
    np.testing.assert_allclose(result.x, np.ones(100), atol=1e-5)
    assert calls == result.nfev and seconds > 0


def test_custom_logsumexp_passes_gradcheck_and_is_stable():
    example = load_example("custom_function")
    assert example["check_gradient"]() is True
    log_sum_exp = example["LogSumExp"].apply
    x = tapejit.tensor(np.array([[1000.0, 1000.0], [-1000.0, -1000.0], [0.5, -2.0]]))
    expected = np.log(2.0) + np.array([1000.0, -1000.0, 0.0])
    expected[2] = np.log(np.exp(0.5) + np.exp(-2.0))
    np.testing.assert_allclose(log_sum_exp(x).numpy(), expected, rtol=1e-12)
    np.testing.assert_allclose(log_sum_exp(x).numpy(), tapejit.logsumexp(x, dim=-1).numpy(), rtol=1e-12)


def test_custom_function_model_trains_and_its_graph_shows_the_custom_node():
    example = load_example("custom_function")
    losses, accuracy, model, (x, y) = example["train"](steps=60)
    assert losses[-1] < 0.5 * losses[0] and accuracy >= 0.9
    mermaid = tapejit.viz.to_mermaid(model.loss(x, y), params=dict(model.named_parameters()))
    assert mermaid.startswith("flowchart BT")
    assert '["LogSumExpBackward"]:::op' in mermaid
    assert '["linear.weight<br/>(3, 2) float32"]:::leaf' in mermaid


def test_graph_pictures_script_writes_dot_and_mermaid(tmp_path):
    out = subprocess.run([sys.executable, str(EXAMPLES / "graph_pictures.py"), str(tmp_path)],
                         check=False, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    dot = (tmp_path / "seed_graph.dot").read_text()
    mermaid = (tmp_path / "seed_graph.mmd").read_text()
    assert dot.startswith("digraph backward") and 'label="PowBackward0"' in dot and dot.count("->") == 6
    assert mermaid.startswith("flowchart BT") and '["w<br/>() float32"]:::leaf' in mermaid
    assert (tmp_path / "seed_graph.svg").exists() == ("wrote" in out.stdout and ".svg" in out.stdout)


def test_replayed_spiral_training_equals_eager():
    sys.path.insert(0, str(EXAMPLES))
    try:
        example = load_example("replay_spiral")
    finally:
        sys.path.remove(str(EXAMPLES))
    eager_losses, eager_accuracy, _ = example["train"](compiled=False, steps=60)
    replay_losses, replay_accuracy, _ = example["train"](compiled=True, steps=60)
    np.testing.assert_allclose(replay_losses, eager_losses, rtol=1e-6)
    assert replay_accuracy == eager_accuracy
    assert replay_losses[-1] < 0.5 * replay_losses[0]
