"""Benchmark group names and the targets (SPEC.md section 5's and the replay groups'),
with the verdict logic.

Shared by ``conftest.py`` (the summary after pytest-benchmark's table) and ``report.py``
(the Markdown report from ``--benchmark-json``).  Pure Python on purpose: the report runs
on a machine with none of the benchmarked libraries installed.

A *group* is one pytest-benchmark group: every peer timed on the same workload, shown
side by side.  A row's *peer* is its ``peer`` parameter (``tapejit``, ``torch``, ...).
"""
import re
from pathlib import Path
from typing import NamedTuple

# ---------------------------------------------------------------------------------------
# groups

GROUP_A_EAGER = "A eager {n:,} ops (record + backward)"
GROUP_A_BACKWARD = "A backward only, 10,000 ops"
GROUP_A_RECORD = "A record only (forward), 10,000 ops"
GROUP_A_SCALING = "A cost vs tape length (tapejit eager)"
GROUP_B_TINY = "B tiny MLP step 2-16-16-1 (tanh, MSE, SGD, batch 32)"
GROUP_B_MNIST = "B MLP step 784-128-10 (ReLU, cross-entropy, SGD, batch 64, float32)"
GROUP_C = "C Rosenbrock gradient n={n:,}"
GROUP_C_FORWARD = "C forward only n={n:,}"
GROUP_C_BACKWARD = "C backward only n={n:,}"
GROUP_C_THREADS = "C Rosenbrock gradient n=1,000,000 on 1 and 2 threads (tj/torch.set_num_threads)"
GROUP_JAX_COMPILE = "JAX compile (trace + lower + XLA compile, not in the run times)"
GROUP_STARTUP = "start-up: import + first gradient (warm cache)"
GROUP_STARTUP_COLD = "start-up: import + first gradient (cold cache)"
GROUP_README_COLD = "start-up: each README example run once, with empty caches"
GROUP_MEMORY_A = "memory: A 10,000 ops, peak RSS over baseline"
GROUP_MEMORY_B = "memory: B MLP 784-128-10, 300 steps, peak RSS over baseline"
# tj.compile: ``tapejit`` is the replay in these groups, ``tapejit_eager`` the eager API
GROUP_A_REPLAY = "A replay {n:,} ops (tj.compile value_and_grad)"
GROUP_A_FIRST_CALL = "A first call of tj.compile (trace + freeze), 10,000 ops"
GROUP_B_TINY_REPLAY = "B tiny MLP step 2-16-16-1 replayed (tj.compile)"
GROUP_B_MNIST_REPLAY = "B MLP step 784-128-10 replayed (tj.compile)"
GROUP_C_REPLAY = "C Rosenbrock value and gradient replayed n={n:,}"
GROUP_C_BATCH = "C batched replay n=10, 20,000 inputs (value and gradient per row)"
GROUP_C_BACKGROUND = "C first {calls} replays after the trace while tier 2 compiles, n={n:,}"
GROUP_C_TANH = "C tanh-heavy value and gradient replayed (loops with a backward loop of their own) n={n:,}"
GROUP_CNN = "CNN LeNet-5 step 28x28 (conv-relu-maxpool x2, 256-120-84-10, cross-entropy, SGD, batch 64, float32)"
GROUP_CNN_REPLAY = "CNN LeNet-5 step replayed (tj.compile)"
GROUP_LSTM = "LSTM step 32-64, sequence 35, batch 20 (MSE, SGD, float32)"
GROUP_LSTM_REPLAY = "LSTM step 32-64, sequence 35, batch 20, replayed (tj.compile)"
GROUP_HVP = "C Rosenbrock Hessian-vector product n=1,000 (hvp vs gradient)"
GROUP_GRADIENT_PENALTY = "gradient penalty double backward, MLP 784-128-10 (ReLU, cross-entropy, batch 64, float32)"

#: groups whose figure of merit is ``extra_info["delta_mb"]`` (megabytes), not time
MEMORY_GROUPS = (GROUP_MEMORY_A, GROUP_MEMORY_B)


# ---------------------------------------------------------------------------------------
# targets

class Target(NamedTuple):
    """One promise about a group: SPEC section 5's, and those of the replay groups.

    kind ``speedup``:  ``peer`` time / tapejit time >= ``bound``
         ``slowdown``: tapejit time / ``peer`` time <= ``bound``
         ``seconds``:  tapejit time <= ``bound``
         ``phase``:    tapejit time in ``group`` / tapejit time in group ``peer`` <= ``bound``
                       (the backward/forward cost ratio)

    "tapejit" is the row labelled ``row``: ``tapejit`` unless a target compares two rows
    of tapejit (``tapejit threads=2`` against ``tapejit threads=1``).
    """
    group: str
    kind: str
    peer: str
    bound: float
    text: str
    row: str = "tapejit"


def readme_examples():
    """``[(index, line, source)]``: the README's Python examples that run on their own (the
    "Adding an op" example defines an op that tapejit has already)."""
    readme = Path(__file__).resolve().parent.parent / "README.md"
    text = readme.read_text() if readme.exists() else ""
    found = []
    for match in re.finditer(r"```python\n(.*?)```", text, re.S):
        source = match.group(1)
        if "define_unary(" not in source:
            found.append((len(found), text.count("\n", 0, match.start()) + 2, source))
    return found


TARGETS = (
    Target(GROUP_A_EAGER.format(n=10_000), "speedup", "torch", 10.0, ">= 10x faster than torch eager"),
    Target(GROUP_A_BACKWARD, "phase", GROUP_A_RECORD, 2.0, "backward <= 2x forward"),
    Target(GROUP_B_MNIST, "slowdown", "torch", 1.0, "no slower than torch eager"),
    Target(GROUP_B_TINY, "speedup", "torch", 3.0, ">= 3x faster than torch eager"),
    Target(GROUP_C.format(n=10), "speedup", "torch", 10.0, ">= 10x faster than torch eager"),
    Target(GROUP_C.format(n=1_000_000), "slowdown", "numpy", 1.5,
           "within 1.5x of the hand-written NumPy gradient"),
    Target(GROUP_C_BACKWARD.format(n=10), "phase", GROUP_C_FORWARD.format(n=10), 2.0,
           "backward <= 2x forward"),
    Target(GROUP_C_BACKWARD.format(n=1_000_000), "phase", GROUP_C_FORWARD.format(n=1_000_000), 2.0,
           "backward <= 2x forward"),
    Target(GROUP_STARTUP, "seconds", "tapejit", 1.0, "< 1 s with a warm Numba cache"),
    Target(GROUP_STARTUP_COLD, "seconds", "tapejit", 10.0, "<= 10 s with an empty cache"),
    *(Target(GROUP_README_COLD, "seconds", "tapejit", 10.0, f"README example {i} (line {line}) <= 10 s cold",
             row=f"tapejit example={i}") for i, line, _ in readme_examples()),
    Target(GROUP_A_REPLAY.format(n=10_000), "slowdown", "interpreter", 1.5,
           "replay within 1.5x of a hand-written tape interpreter on the same arrays"),
    Target(GROUP_A_REPLAY.format(n=10_000), "slowdown", "c_interpreter", 1.5,
           "replay within 1.5x of a C switch interpreter over one record per source-level op (issue 19)"),
    Target(GROUP_A_FIRST_CALL, "seconds", "tapejit", 0.5, "first call (trace) < 0.5 s, warm Numba cache"),
    Target(GROUP_B_TINY_REPLAY, "slowdown", "jax", 1.0, "replayed step no slower than jax.jit"),
    Target(GROUP_B_MNIST_REPLAY, "slowdown", "numpy", 1.1,
           "replayed step within 1.1x of the hand-written NumPy step"),
    Target(GROUP_C_REPLAY.format(n=10), "slowdown", "jax", 1.0, "replay no slower than jax.jit"),
    Target(GROUP_C_REPLAY.format(n=1_000_000), "slowdown", "jax", 1.0, "replay no slower than jax.jit"),
    Target(GROUP_C_REPLAY.format(n=1_000_000), "slowdown", "numba_fused", 1.5,
           "tier 2 within 1.5x of a hand-written fused Numba loop", row="tapejit_tier2"),
    Target(GROUP_C_REPLAY.format(n=1_000_000), "slowdown", "jax", 1.0, "tier 2 faster than jax.jit",
           row="tapejit_tier2"),
    Target(GROUP_C_BACKGROUND.format(calls=100, n=1_000_000), "slowdown", "tapejit_tier1", 1.1,
           "the first 100 calls while tier 2 compiles within tier 1's plus 10%"),
    Target(GROUP_C_TANH.format(n=100_000), "slowdown", "tapejit", 1.0, "tier 2 no slower than tier 1",
           row="tapejit_tier2"),
    # NumPy mode's call overhead (tj.value_and_grad hands f traced arrays): eager and replayed.
    Target(GROUP_C_REPLAY.format(n=10), "seconds", "tapejit", 40e-6, "eager tj.value_and_grad <= 40 us",
           row="tapejit_eager"),
    Target(GROUP_C_REPLAY.format(n=10), "seconds", "tapejit", 6e-6, "replayed value_and_grad <= 6 us"),
    Target(GROUP_C_BATCH, "speedup", "tapejit threads=1", 1.7, "2 threads >= 1.7x faster than 1",
           row="tapejit threads=2"),
    Target(GROUP_C_BATCH, "speedup", "tapejit_tier2 threads=1", 1.7, "tier 2: 2 threads >= 1.7x faster than 1",
           row="tapejit_tier2 threads=2"),
    # issue 19's batch targets, on the batch's fastest path: tier 2's fused row loops
    Target(GROUP_C_BATCH, "slowdown", "numba_rows threads=1", 2.0,
           "tier 2 <= 2x a hand-written Numba loop with the row index innermost", row="tapejit_tier2 threads=1"),
    Target(GROUP_C_BATCH, "slowdown", "jax", 1.0, "tier 2 no slower than jax.jit(vmap(value_and_grad))",
           row="tapejit_tier2 threads=1"),
    Target(GROUP_C_BATCH, "speedup", "torch threads=1", 20.0, "tier 2 >= 20x faster than torch.func.vmap(grad)",
           row="tapejit_tier2 threads=1"),
    Target(GROUP_C_BATCH, "speedup", "torch threads=2", 20.0,
           "tier 2 >= 20x faster than torch.func.vmap(grad), both on 2 threads", row="tapejit_tier2 threads=2"),
    # The ceiling of the two above: if the hand-written row loop is not 20x faster than
    # torch.func.vmap on this machine, no replay of the same arithmetic can be.
    Target(GROUP_C_BATCH, "speedup", "torch threads=1", 20.0,
           "(the ceiling of the 20x target) the hand-written Numba row loop >= 20x faster than torch.func.vmap",
           row="numba_rows threads=1"),
    Target(GROUP_C_BATCH, "speedup", "torch threads=2", 20.0,
           "(the ceiling of the 20x target) the hand-written Numba row loop >= 20x faster than torch.func.vmap, "
           "both on 2 threads", row="numba_rows threads=2"),
    Target(GROUP_CNN, "slowdown", "torch", 1.0, "eager LeNet-5 step no slower than torch eager"),
    Target(GROUP_LSTM, "slowdown", "torch", 1.0, "no slower than torch eager"),
    Target(GROUP_LSTM_REPLAY, "slowdown", "torch", 1.0, "replayed step no slower than torch eager"),
    Target(GROUP_HVP, "slowdown", "tapejit_gradient", 3.0, "replayed hvp <= 3x a replayed gradient"),
    Target(GROUP_GRADIENT_PENALTY, "slowdown", "torch", 1.0, "eager double backward no slower than torch"),
)


class Verdict(NamedTuple):
    target: Target
    value: float | None   # the measured ratio (or seconds); None if a row is missing
    met: bool | None      # None if a row is missing
    detail: str           # e.g. "torch/tapejit = 4.5 (needs >= 10): missed by 2.2x"


def evaluate(target, times):
    """Verdict for ``target`` given ``times[group][peer]`` = seconds (one statistic)."""
    row = target.row
    mine = times.get(target.group, {}).get(row)
    if target.kind == "phase":
        other = times.get(target.peer, {}).get(row)
        label = "backward/forward"
    elif target.kind == "seconds":
        other, label = 1.0, f"{row} seconds"
    else:
        other = times.get(target.group, {}).get(target.peer)
        label = f"{target.peer}/{row}" if target.kind == "speedup" else f"{row}/{target.peer}"
    if mine is None or other is None:
        return Verdict(target, None, None, "not measured in this run")
    if target.kind == "speedup":
        value = other / mine
        met = value >= target.bound
        miss = target.bound / value
        need = f">= {target.bound:g}"
    else:  # slowdown, seconds, phase: tapejit's time over the other, at most the bound
        value = mine / other
        met = value <= target.bound
        miss = value / target.bound
        need = f"<= {target.bound:g}"
    detail = f"{label} = {value:.3g} (needs {need})"
    detail += ": met" if met else f": missed by {miss:.2f}x"
    return Verdict(target, value, met, detail)


def evaluate_all(times):
    return [evaluate(t, times) for t in TARGETS]


# ---------------------------------------------------------------------------------------
# rows: one benchmark's result, from pytest-benchmark's objects or its JSON

def row_label(params, keys=()):
    """The peer (``tapejit``), followed by the parameters ``keys`` (``tapejit n_ops=100``)."""
    peer = (params or {}).get("peer")
    rest = " ".join(f"{k}={params[k]:,}" if isinstance(params[k], int) else f"{k}={params[k]}"
                    for k in keys if k in params)
    return " ".join(x for x in (peer, rest) if x) or "?"


def labelled(rows):
    """Rows ``(group, params, stats, extra_info)`` -> ``(group, label, stats, extra_info)``.

    A label is the row's peer, plus any parameter that tells apart rows of the same peer
    in the same group (the scaling group's ``n_ops``, the JAX compile group's
    ``problem``); a parameter fixed within a group (``n_ops`` of "A eager 10,000 ops")
    is already in the group's name.
    """
    by_peer = {}
    for group, params, _, _ in rows:
        by_peer.setdefault((group, params.get("peer")), []).append(params)
    varying = {}
    for key, plist in by_peer.items():
        names = sorted({k for p in plist for k in p if k != "peer"})
        varying[key] = [k for k in names if len({repr(p.get(k)) for p in plist}) > 1]
    return [(group, row_label(params, varying[(group, params.get("peer"))]), stats, extra)
            for group, params, stats, extra in rows]


def figure(group, stats, extra_info, stat="median"):
    """A row's figure of merit: megabytes for memory groups, else seconds (``stat``)."""
    if group in MEMORY_GROUPS:
        return (extra_info or {}).get("delta_mb")
    return stats.get(stat)


def table(rows, stat="median"):
    """``{group: {label: figure}}`` from ``labelled`` rows, in the order first seen."""
    out = {}
    for group, label, stats, extra in rows:
        value = figure(group, stats, extra, stat)
        if value is not None:
            out.setdefault(group, {})[label] = value
    return out


def human(value, group, terminal=False):
    """A figure with its unit: seconds scaled to s/ms/us/ns, memory groups in MB.  The
    terminal summary wants fixed-width columns; the Markdown report wants 3 digits."""
    if group in MEMORY_GROUPS:
        return f"{value:8.1f} MB" if terminal else f"{value:.1f} MB"
    micro = "us" if terminal else "µs"
    for unit, scale in (("s", 1.0), ("ms", 1e-3), (micro, 1e-6), ("ns", 1e-9)):
        if value >= scale or unit == "ns":
            return f"{value / scale:8.3f} {unit:2s}" if terminal else f"{value / scale:.3g} {unit}"
