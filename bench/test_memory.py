"""Memory: peak RSS of workloads A and B, tapejit against PyTorch; RSS growth over
100,000 steps of forward-only, eager training and replayed training loops.

One fresh interpreter per (library, workload) runs ``memory_probe.py``, so no library's
allocations, caches or imports leak into another's figure.  The figure of merit is
``extra_info["delta_mb"]``: the peak resident set minus the one right after the import
(report.py and the conftest summary use it instead of the time; the time shown by
pytest-benchmark is the child's wall time and means nothing here).
"""
import json
import os
import subprocess
import sys

import pytest
import targets as T
import workloads as W

PROBE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "memory_probe.py")
GROUPS = {"A": T.GROUP_MEMORY_A, "B": T.GROUP_MEMORY_B}


def _probe(name, workload):
    proc = subprocess.run([sys.executable, PROBE, name, workload],
                          check=False, capture_output=True, text=True, timeout=3600)
    if proc.returncode != 0:
        raise AssertionError(f"memory probe {name} {workload} failed ({proc.returncode}):\n"
                             f"{proc.stderr}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("workload", tuple(GROUPS))
@pytest.mark.parametrize("peer", W.AUTOGRAD_PEERS, indirect=True)
def test_peak_memory(peer, benchmark, workload):
    if workload == "B":
        reason = W.missing_module_api(peer)
        if reason:
            pytest.skip(reason)
    benchmark.group = GROUPS[workload]
    if not benchmark.disabled:
        # warm Numba's cache first: a figure that includes compiling the sweeps (LLVM's
        # memory) would measure the first run on this machine, not the workload
        _probe(peer.name, workload)
    result = benchmark.pedantic(_probe, args=(peer.name, workload), rounds=1, iterations=1)
    assert result["peer"] == peer.name and result["delta_mb"] >= 0, result
    if workload == "B":
        # a loose bound: a steady training loop must not keep allocating
        assert result["rss_growth_mb"] < 20, result
    benchmark.extra_info.update({k: v for k, v in result.items() if k not in ("peer", "workload")})


GROUP_LOOPS = "memory: tiny MLP loops, RSS growth over 100,000 steps (issue 14: under 5 MB)"


@pytest.mark.parametrize("loop", ("forward", "eager", "replay"))
@pytest.mark.parametrize("peer", W.AUTOGRAD_PEERS, indirect=True)
def test_memory_stays_flat_over_many_steps(peer, benchmark, loop):
    """A loop of forward passes whose results are never read, an eager training loop and
    a replayed one (``tj.compile``; tapejit only): after a warm-up the resident set must
    not grow (the figure is ``extra_info["rss_growth_mb"]``; the time shown is the
    child's wall time)."""
    if loop == "replay" and peer.name != "tapejit":
        pytest.skip("tj.compile is tapejit's")
    reason = W.missing_module_api(peer)
    if reason:
        pytest.skip(reason)
    benchmark.group = GROUP_LOOPS
    result = benchmark.pedantic(_probe, args=(peer.name, loop), rounds=1, iterations=1)
    assert result["peer"] == peer.name and result["steps"] > 0, result
    benchmark.extra_info.update({k: v for k, v in result.items() if k not in ("peer", "workload")})
    assert result["rss_growth_mb"] < 5, result
