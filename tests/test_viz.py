"""Graph pictures (``tj.viz``) and the printable tape table."""
import shutil

import numpy as np
import pytest

import tapejit as tj


def seed_graph():
    w = tj.tensor(2.0, requires_grad=True)
    b = tj.tensor(1.0, requires_grad=True)
    x, y_true = tj.tensor(3.0), tj.tensor(10.0)
    return (w * x + b - y_true) ** 2, w, b


def test_backward_graph_nodes_and_edges_follow_next_functions():
    loss, w, b = seed_graph()
    nodes, edges = tj.viz.backward_graph(loss, params={"w": w, "b": b})
    labels = {nid: label for nid, label, _ in nodes}
    by_label = {label.split("\n")[0]: nid for nid, label, _ in nodes}
    assert [label.split("\n")[0] for _, label, _ in nodes] == [
        "output () float32", "PowBackward0", "SubBackward0", "AddBackward0", "MulBackward0", "b", "w"]
    assert labels[by_label["w"]] == "w\n() float32"
    expected = {("PowBackward0", "output () float32"), ("SubBackward0", "PowBackward0"),
                ("AddBackward0", "SubBackward0"), ("MulBackward0", "AddBackward0"),
                ("w", "MulBackward0"), ("b", "AddBackward0")}
    named = {(labels[a].split("\n")[0], labels[b_].split("\n")[0]) for a, b_ in edges}
    assert named == expected


def test_shared_subexpressions_appear_once():
    x = tj.tensor([1.0, 2.0], requires_grad=True)
    y = x.exp()
    z = (y * y + y).sum()
    nodes, edges = tj.viz.backward_graph(z)
    names = [label.split("\n")[0] for _, label, _ in nodes]
    assert names.count("ExpBackward0") == 1 and names.count("AccumulateGrad") == 1
    exp_id = next(nid for nid, label, _ in nodes if label == "ExpBackward0")
    assert sum(1 for a, _ in edges if a == exp_id) == 3   # into mul (twice) and add


def test_to_dot_text():
    loss, w, b = seed_graph()
    dot = tj.viz.to_dot(loss, params={"w": w, "b": b})
    assert dot.startswith("digraph backward {\n  rankdir=BT;")
    assert 'label="PowBackward0"' in dot
    assert 'label="w\\n() float32"' in dot
    assert dot.count("->") == 6 and dot.rstrip().endswith("}")


def test_to_mermaid_text():
    x = tj.tensor(np.ones((2, 3)), requires_grad=True)
    m = tj.viz.to_mermaid((x @ x.T).tanh().sum())
    lines = m.splitlines()
    assert lines[0] == "flowchart BT"
    assert '  n0["SumBackward0"]:::op' in lines
    assert any(line.endswith('["AccumulateGrad<br/>(2, 3) float64"]:::leaf') for line in lines)
    assert sum("-->" in line for line in lines) == 6   # out<-sum<-tanh<-mm<-{x, t<-x}


def test_custom_function_and_leaf_without_history():
    class Double(tj.autograd.Function):
        @staticmethod
        def forward(ctx, x):
            return x * 2

        @staticmethod
        def backward(ctx, g):
            return g * 2

    x = tj.tensor([1.0], requires_grad=True)
    assert "DoubleBackward" in tj.viz.to_dot(Double.apply(x).sum())
    nodes, edges = tj.viz.backward_graph(tj.tensor([1.0]))
    assert len(nodes) == 1 and edges == []


def test_deep_graph_does_not_hit_the_recursion_limit():
    x = tj.tensor(0.5, requires_grad=True)
    y = x
    for _ in range(3000):
        y = y * 1.0001
    nodes, _ = tj.viz.backward_graph(y)
    assert len(nodes) == 3002


def test_render_without_dot_is_a_clear_error(monkeypatch):
    loss, _, _ = seed_graph()
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match="needs Graphviz's `dot` program"):
        tj.viz.render(loss, "graph.svg")


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz's dot is not installed")
def test_render_svg(tmp_path):
    loss, w, b = seed_graph()
    path = tj.viz.render(loss, tmp_path / "graph.svg", params={"w": w, "b": b})
    text = path.read_text()
    assert "<svg" in text and "PowBackward0" in text


def test_tape_summary_lists_every_record():
    # The thread's tape may still hold earlier tests' graphs: check the last records.
    loss, _, _ = seed_graph()
    table = loss._tape.summary()
    lines = table.splitlines()
    assert lines[0].split() == ["#", "op", "node", "dtype", "out", "a", "b", "value"]
    ops = [line.split()[1] for line in lines[1:]]
    assert ops[-8:] == ["load", "load", "mul", "load", "add", "load", "sub", "square"]
    assert "AccumulateGrad" in table and "PowBackward0" in table
    assert tj.viz.summary(loss) == table
    assert tj.viz.summary(tj.tensor(1.0)) == "(a leaf: no records)"


def test_tape_summary_shows_a_slice_s_leading_values():
    x = tj.tensor([1.0, 2.0, 3.0, 4.0, 5.0], requires_grad=True)
    y = x[1:] * 2.0
    row = [line for line in y._tape.summary().splitlines() if line.split()[1] == "slice"][-1]
    assert row.endswith("[2, 3, 4, ...]")
