"""Pictures of the backward graph: Graphviz DOT, Mermaid, and an SVG/PNG when ``dot`` exists.

The graph is the one ``grad_fn``/``next_functions`` expose (PyTorch's node names), so a
picture drawn here matches what torchviz draws for the same PyTorch program: one box per
backward node, leaves that require grad as ``AccumulateGrad`` with their shapes, and the
output tensor at the top.  Edges point the way the forward pass ran.
"""
import os
import shutil
import subprocess

from tapejit.tensor import Tensor


def _shape(t):
    return "(" + ", ".join(str(s) for s in t.shape) + ("," if t.ndim == 1 else "") + ")"


def backward_graph(t, params=None):
    """``(nodes, edges)`` of ``t``'s backward graph: nodes as ``(id, label, kind)`` with kind
    ``"output"``, ``"op"`` or ``"leaf"``; edges as ``(from id, to id)``.  ``params`` maps
    names to leaf tensors, to label the leaves."""
    if not isinstance(t, Tensor):
        raise TypeError(f"tapejit.viz: expected a Tensor, got {type(t).__name__}")
    names = {id(p): name for name, p in (params or {}).items()}
    nodes = [("out", f"output {_shape(t)} {t.dtype.name}", "output")]
    edges = []
    root = t.grad_fn
    if root is None:
        return nodes, edges
    ids = {}

    def node_id(node):
        key = _key(node)
        if key not in ids:
            ids[key] = f"n{len(ids)}"
            leaf = getattr(node, "variable", None)
            if leaf is not None:
                label = f"{names.get(id(leaf), 'AccumulateGrad')}\n{_shape(leaf)} {leaf.dtype.name}"
                nodes.append((ids[key], label, "leaf"))
            else:
                nodes.append((ids[key], node.name(), "op"))
            return ids[key], True
        return ids[key], False

    first, _ = node_id(root)
    edges.append((first, "out"))
    stack = [root]
    while stack:   # iterative: graphs from long loops are deeper than Python's recursion limit
        node = stack.pop()
        me = ids[_key(node)]
        for child, _ in node.next_functions:
            if child is None:
                continue
            cid, new = node_id(child)
            edges.append((cid, me))
            if new:
                stack.append(child)
    return nodes, edges


def _key(node):
    """Identity of a node: ``grad_fn`` objects are made afresh on each access, so a record's
    node is known by (tape, record index), a leaf's by the leaf."""
    leaf = getattr(node, "variable", None)
    if leaf is not None:
        return ("leaf", id(leaf))
    r = getattr(node, "_r", None)
    if r is not None:
        return ("record", id(node._tape), r)
    return ("object", id(node))   # a custom Function's context: one object per call


_DOT_STYLE = {
    "output": 'style=filled, fillcolor="#c8e6c9"',
    "op": 'style=filled, fillcolor="#eeeeee"',
    "leaf": 'style=filled, fillcolor="#bbdefb"',
}


def to_dot(t, params=None):
    """Graphviz DOT text of ``t``'s backward graph."""
    nodes, edges = backward_graph(t, params)
    lines = ["digraph backward {", "  rankdir=BT;", '  node [shape=box, fontname="Helvetica", fontsize=11];']
    for nid, label, kind in nodes:
        text = label.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")
        lines.append(f'  {nid} [label="{text}", {_DOT_STYLE[kind]}];')
    for a, b in edges:
        lines.append(f"  {a} -> {b};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def to_mermaid(t, params=None):
    """Mermaid flowchart text of ``t``'s backward graph (renders in GitHub Markdown)."""
    nodes, edges = backward_graph(t, params)
    lines = ["flowchart BT"]
    for nid, label, kind in nodes:
        text = label.replace('"', "#quot;").replace("\n", "<br/>")
        lines.append(f'  {nid}["{text}"]:::{kind}')
    for a, b in edges:
        lines.append(f"  {a} --> {b}")
    lines.append("  classDef output fill:#c8e6c9")
    lines.append("  classDef op fill:#eeeeee")
    lines.append("  classDef leaf fill:#bbdefb")
    return "\n".join(lines) + "\n"


def render(t, path, params=None):
    """Write a picture of ``t``'s backward graph to ``path`` (format from the suffix: .svg,
    .png, .pdf) with Graphviz's ``dot`` program; returns ``path``."""
    exe = shutil.which("dot")
    if exe is None:
        raise RuntimeError(
            "tapejit.viz.render needs Graphviz's `dot` program on PATH (for example "
            "`apt install graphviz` or `brew install graphviz`); tapejit.viz.to_dot(t) gives the "
            "DOT text without it")
    fmt = os.path.splitext(str(path))[1].lstrip(".").lower() or "svg"
    done = subprocess.run([exe, f"-T{fmt}", "-o", str(path)], input=to_dot(t, params).encode(),
                          capture_output=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"tapejit.viz.render: dot failed for format {fmt!r}: "
                           f"{done.stderr.decode(errors='replace').strip()}")
    return path


def summary(t):
    """A printable table of the tape records ``t`` depends on (what ``python -m tapejit`` prints)."""
    from tapejit.summary import tape_table   # only to print a tape: ~0.7 ms of start-up
    return tape_table(t)
