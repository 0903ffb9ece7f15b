"""The package's layers run one way (issue 15): replay/ plugs into the eager core, which never
imports it, so eager mode works without it."""
import subprocess
import sys
import textwrap

_WITHOUT_REPLAY = textwrap.dedent("""
    import importlib.abc
    import sys

    class RefuseReplay(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "tapejit.replay" or name.startswith("tapejit.replay."):
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, RefuseReplay())
    import numpy as np
    import tapejit as tj

    assert not any(m.startswith("tapejit.replay") for m in sys.modules)
    assert not hasattr(tj, "compile")
    model = tj.nn.Sequential(tj.nn.Linear(3, 4), tj.nn.Tanh(), tj.nn.Linear(4, 1))
    opt = tj.optim.SGD(model.parameters(), lr=0.1)
    x = tj.tensor(np.linspace(-1.0, 1.0, 6).reshape(2, 3))
    before = model[0].weight.detach().clone()
    loss = ((model(x) - 1.0) ** 2).mean()
    opt.zero_grad()
    loss.backward()
    grad = model[0].weight.grad.clone()
    opt.step()
    assert tj.allclose(model[0].weight.detach(), before - 0.1 * grad)
    labels = tj.tensor([0, 2])
    ce = tj.nn.functional.cross_entropy(tj.randn(2, 3, requires_grad=True), labels)
    ce.backward()
    print("eager without replay: ok")
""")


def test_eager_mode_works_without_replay():
    done = subprocess.run([sys.executable, "-c", _WITHOUT_REPLAY], capture_output=True, text=True,
                          timeout=600)
    assert done.returncode == 0, done.stderr
    assert "eager without replay: ok" in done.stdout
