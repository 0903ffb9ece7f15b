"""Peak memory of workload A or B in this process, for one library.  Run by
``test_memory.py`` in a fresh interpreter per (library, workload):

    python bench/memory_probe.py tapejit A

and prints one JSON line.  Memory is the resident set's high-water mark after the
import, against the same after the workload.  The difference is what the workload costs
beyond the imported library: compiled code loaded on first use, the recorded graphs,
buffers, optimizer state.

The high-water mark is Linux's ``VmHWM`` (``/proc/self/status``), which belongs to this
process's own address space.  ``resource.getrusage(RUSAGE_SELF).ru_maxrss`` is the
fallback elsewhere, but not the first choice: Linux carries it across ``execve``, so a
child of a big pytest process (torch, JAX and tapejit imported: about 2 GB) would start
with the parent's peak and every figure would read 0.

Before the measured part the workload's gradient is checked (A: the 200-op graph against
the pure-Python reference; B: one step against the hand-written NumPy step), so a wrong
answer never reports a memory figure.  ``after_check_mb`` is the high-water mark then,
and ``workload_mb`` the peak's growth after it: the workload without first-use costs
(compiled code, allocator pools), which ``delta_mb`` includes.

B also samples the current RSS after 10 % of its steps and at the end: ``rss_growth_mb``
is the growth in between, which should be about 0 (SPEC: no growth over many steps).

The loop workloads run workload B's tiny MLP (2-16-16-1) for ``LOOP_STEPS`` (100,000)
steps after ``LOOP_WARMUP`` (10,000) and report the current RSS's growth over them
(``rss_growth_mb``; the issue's target: under 5 MB):

* ``forward``: ``model(x)`` whose result nothing reads (tapejit used to keep every
  pending record: 100 -> 550 MB over 50,000 calls);
* ``eager``: the training step (zero_grad, forward, loss, backward, SGD step);
* ``replay``: the same step under ``tj.compile`` (tapejit only).

    python bench/memory_probe.py tapejit forward
"""
import json
import os
import resource
import sys
import time

A_OPS = 10_000
A_ITERATIONS = 3
B_STEPS = 300
LOOP_STEPS = int(os.environ.get("TAPEJIT_LOOP_STEPS", 100_000))
LOOP_WARMUP = LOOP_STEPS // 10
LOOPS = ("forward", "eager", "replay")


def max_rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024.0      # kB
    except OSError:
        pass
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 1024.0   # bytes on macOS


def current_rss_mb():
    try:
        import psutil
        return psutil.Process().memory_info().rss / 2**20
    except ImportError:   # Linux without psutil: statm's second field is resident pages
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def main(name, workload):
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    import workloads as W
    import peers_functional  # noqa: F401  (adds the functional peers' workloads to W)
    lib = W.library(name)
    if name == "torch":
        lib.tl.set_num_threads(1)
    baseline = max_rss_mb()
    result = {"peer": name, "workload": workload, "baseline_mb": round(baseline, 2)}
    if workload == "A":
        W.assert_grads_close(W.scalar_graph_grads(lib), W.scalar_graph_reference(),
                             f"{name}: workload A at {W.A_CHECK_OPS} ops")
        after_check = max_rss_mb()
        for _ in range(A_ITERATIONS):
            W.scalar_graph_step(lib, A_OPS)
        peak = max_rss_mb()
        result["bytes_per_op"] = round((peak - after_check) * 2**20 / A_OPS)
        result["n_ops"] = A_OPS
    elif workload == "B":
        spec = W.MNIST_MLP
        W.assert_mlp_step_ok(W.mlp_trainer(lib, spec), spec, f"{name}: workload B step")
        after_check = max_rss_mb()
        trainer = W.mlp_trainer(lib, spec)
        early = None
        for step in range(B_STEPS):
            trainer.step()
            if step == B_STEPS // 10:
                early = current_rss_mb()
        result["rss_growth_mb"] = round(current_rss_mb() - early, 2)
        result["steps"] = B_STEPS
        peak = max_rss_mb()
    elif workload in LOOPS:
        spec = W.TINY_MLP
        if workload == "replay":
            trainer = W.ReplayMLP(lib, spec, W.mlp_init(spec), *W.mlp_batch(spec))
        else:
            trainer = W.mlp_trainer(lib, spec)
        if workload == "forward":
            model, x = trainer.model, trainer.x

            def step():
                model(x)
        else:
            step = trainer.step
        after_check = max_rss_mb()
        for _ in range(LOOP_WARMUP):
            step()
        early = current_rss_mb()
        t0 = time.perf_counter()
        for _ in range(LOOP_STEPS):
            step()
        result["seconds"] = round(time.perf_counter() - t0, 2)
        result["rss_growth_mb"] = round(current_rss_mb() - early, 2)
        result["steps"] = LOOP_STEPS
        peak = max_rss_mb()
    else:
        raise SystemExit(f"unknown workload {workload!r}")
    result.update(after_check_mb=round(after_check, 2), peak_mb=round(peak, 2),
                  delta_mb=round(peak - baseline, 2), workload_mb=round(peak - after_check, 2))
    print(json.dumps(result))


if __name__ == "__main__":
    main(*sys.argv[1:])
