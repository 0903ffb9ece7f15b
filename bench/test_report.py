"""``report.py`` on a small synthetic pytest-benchmark JSON: ratios, targets, chart."""
import json

import pytest
import report
import targets as T


def _bench(group, params, median, mean=None, extra=None):
    mean = median if mean is None else mean
    return {"group": group, "name": f"test_x[{params}]", "params": params,
            "extra_info": extra or {},
            "stats": {"min": median * 0.9, "max": median * 1.2, "mean": mean, "median": median,
                      "stddev": 0.0, "rounds": 5}}


@pytest.fixture
def synthetic(tmp_path):
    a10k = T.GROUP_A_EAGER.format(n=10_000)
    c1e6 = T.GROUP_C.format(n=1_000_000)
    data = {
        "datetime": "2026-01-02T03:04:05", "version": "5.3.1",
        "machine_info": {"cpu": {"brand_raw": "Test CPU"}, "python_version": "3.11.7",
                         "system": "Linux", "release": "6.0", "bench_cpu_count": 2,
                         "bench_versions": {"tapejit": "0.1.0", "torch": "2.13.0", "jax": "not installed"},
                         "bench_threads": {"OMP_NUM_THREADS": "1"}},
        "commit_info": {"id": "0123456789abcdef", "branch": "main", "dirty": False,
                        "time": "2026-01-02T03:00:00"},
        "benchmarks": [
            _bench(a10k, {"peer": "tapejit", "n_ops": 10_000}, 0.100),
            _bench(a10k, {"peer": "torch", "n_ops": 10_000}, 0.500),
            _bench(a10k, {"peer": "python", "n_ops": 10_000}, 0.050),
            _bench(c1e6, {"peer": "tapejit", "n": 1_000_000}, 0.012),
            _bench(c1e6, {"peer": "numpy", "n": 1_000_000}, 0.010),
            _bench(T.GROUP_A_BACKWARD, {"peer": "tapejit"}, 0.001, extra={"records": 30017}),
            _bench(T.GROUP_A_RECORD, {"peer": "tapejit"}, 0.100),
            _bench(T.GROUP_MEMORY_A, {"peer": "tapejit"}, 3.0, extra={"delta_mb": 40.0}),
            _bench(T.GROUP_MEMORY_A, {"peer": "torch"}, 4.0, extra={"delta_mb": 100.0}),
            _bench(T.GROUP_A_SCALING, {"peer": "tapejit", "n_ops": 100}, 0.001,
                   extra={"us_per_op": 10.0}),
            _bench(T.GROUP_A_SCALING, {"peer": "tapejit", "n_ops": 1_000}, 0.009),
            _bench(T.GROUP_JAX_COMPILE, {"peer": "jax", "problem": "A 1,000 ops"}, 7.0),
            _bench(T.GROUP_JAX_COMPILE, {"peer": "jax", "problem": "C n=10"}, 0.05),
        ],
    }
    path = tmp_path / "bench.json"
    path.write_text(json.dumps(data))
    return path


def test_markdown_ratios_targets_and_other_groups(synthetic):
    text = report.markdown(report.load(synthetic))
    a10k = T.GROUP_A_EAGER.format(n=10_000)
    row = next(line for line in text.splitlines() if line.startswith(f"| {a10k} |"))
    # columns: tapejit, torch, numpy, python (PEER_ORDER, peers present only)
    assert row == f"| {a10k} | **100 ms** | 500 ms (×5) | – | 50 ms (×0.5) |"
    mem = next(line for line in text.splitlines() if line.startswith(f"| {T.GROUP_MEMORY_A} |"))
    assert "**40.0 MB**" in mem and "100.0 MB (×2.5)" in mem
    # targets: 5x is short of 10x; 1.2 is within 1.5; backward/forward 0.01 <= 2
    assert "torch/tapejit = 5 (needs >= 10): missed by 2.00x" in text
    assert "tapejit/numpy = 1.2 (needs <= 1.5): met" in text
    assert "backward/forward = 0.01 (needs <= 2): met" in text
    assert "| not measured: not measured in this run |" in text       # e.g. start-up
    # groups without ratios are listed row by row, with their notes
    assert f"| {T.GROUP_A_SCALING} | tapejit n_ops=100 | 1 ms |" in text and "us_per_op=10.0" in text
    assert f"| {T.GROUP_JAX_COMPILE} | jax problem=A 1,000 ops | 7 s |" in text
    assert "records=30017" in text
    # the run header
    assert "Test CPU, 2 CPUs" in text and "commit" in text.lower() and "0123456789" in text
    assert "jax not installed" not in text


def test_main_writes_markdown_and_chart(synthetic, tmp_path):
    pytest.importorskip("matplotlib", reason="the chart needs matplotlib (pip install -e '.[bench]')")
    out, png = tmp_path / "report.md", tmp_path / "chart.png"
    assert report.main([str(synthetic), "--out", str(out), "--png", str(png)]) == 0
    assert out.read_text().startswith("### Run")
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and png.stat().st_size > 5_000


def test_evaluate_speedup_slowdown_and_missing_rows():
    group = T.GROUP_A_EAGER.format(n=10_000)
    target = next(t for t in T.TARGETS if t.group == group)
    assert T.evaluate(target, {group: {"tapejit": 1.0, "torch": 12.0}}).met is True
    verdict = T.evaluate(target, {group: {"tapejit": 1.0}})
    assert verdict.met is None and verdict.value is None


def test_evaluate_two_rows_of_tapejit():
    """The batched-replay target compares tapejit with itself: 1 thread over 2 threads."""
    target = next(t for t in T.TARGETS if t.group == T.GROUP_C_BATCH)
    rows = [(T.GROUP_C_BATCH, {"peer": "tapejit", "threads": 1}, {"median": 0.010}, {}),
            (T.GROUP_C_BATCH, {"peer": "tapejit", "threads": 2}, {"median": 0.004}, {})]
    times = T.table(T.labelled(rows))
    assert times == {T.GROUP_C_BATCH: {"tapejit threads=1": 0.010, "tapejit threads=2": 0.004}}
    verdict = T.evaluate(target, times)
    assert verdict.met is True
    assert verdict.detail == "tapejit threads=1/tapejit threads=2 = 2.5 (needs >= 1.7): met"
    assert T.evaluate(target, {T.GROUP_C_BATCH: {"tapejit threads=1": 0.010}}).met is None
