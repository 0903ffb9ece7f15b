"""Workload B: one SGD training step of a small MLP, side by side (SPEC.md section 5).

tapejit and torch run the same module-API code (``workloads.ModuleMLP``: ``nn.Sequential``
of ``nn.Linear`` layers, ``nn.MSELoss`` / ``nn.CrossEntropyLoss``, ``optim.SGD``); JAX
runs one compiled step function, HIPS autograd ``value_and_grad`` plus a NumPy update,
and ``numpy`` the hand-written backward pass.  Every peer first takes one step from the
shared initial parameters, and its loss and parameter update must equal the hand-written
NumPy step's.
"""
import pytest
import targets as T
import workloads as W

B_PEERS = ("tapejit", "torch", "jax", "autograd", "numpy")
SPECS = {"tiny": (W.TINY_MLP, T.GROUP_B_TINY), "mnist": (W.MNIST_MLP, T.GROUP_B_MNIST)}


def require_module_api(lib):
    """Skips until ``lib`` has the nn/optim names workload B uses (tapejit's are new)."""
    if lib.name in W.AUTOGRAD_PEERS:
        reason = W.missing_module_api(lib)
        if reason:
            pytest.skip(reason)


@pytest.mark.parametrize("model", tuple(SPECS))
@pytest.mark.parametrize("peer", B_PEERS, indirect=True)
def test_mlp_step(peer, benchmark, model):
    spec, group = SPECS[model]
    require_module_api(peer)
    W.assert_mlp_step_ok(W.mlp_trainer(peer, spec), spec, f"{peer.name} {model} MLP step")
    trainer = W.mlp_trainer(peer, spec)
    benchmark.group = group
    benchmark.extra_info["model"] = model
    benchmark(trainer.step)
    # one batch, small steps: after the timed steps the loss has gone down
    W.assert_mlp_trained(trainer, spec, (peer.name, model))
