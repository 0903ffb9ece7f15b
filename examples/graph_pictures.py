"""Pictures of the seed example's backward graph: Graphviz DOT, Mermaid, and an SVG.

The graph is L = (w*x + b - y_true)**2 from ``seed_examples.py``; its nodes are the
``grad_fn`` objects PyTorch would show (PowBackward0, SubBackward0, ...).  The SVG needs
Graphviz's ``dot`` program; without it the script prints the DOT and Mermaid text only.

Run: python examples/graph_pictures.py [output directory]
(prints the DOT and Mermaid text; with a directory, also writes the files there)
"""
import shutil
import sys
from pathlib import Path

import tapejit as tj


def seed_loss():
    """The seed example's loss at w=2, x=3, b=1, y_true=10, with its named leaves."""
    w = tj.tensor(2.0, requires_grad=True)
    b = tj.tensor(1.0, requires_grad=True)
    x, y_true = tj.tensor(3.0), tj.tensor(10.0)
    return (w * x + b - y_true) ** 2, {"w": w, "b": b}


def write_pictures(directory):
    """Write seed_graph.dot, seed_graph.mmd and (when ``dot`` exists) seed_graph.svg into
    ``directory``; returns the paths written."""
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    loss, params = seed_loss()
    written = []
    for suffix, text in ((".dot", tj.viz.to_dot(loss, params)), (".mmd", tj.viz.to_mermaid(loss, params))):
        path = directory / f"seed_graph{suffix}"
        path.write_text(text)
        written.append(path)
    if shutil.which("dot"):
        written.append(Path(tj.viz.render(loss, directory / "seed_graph.svg", params)))
    return written


if __name__ == "__main__":
    loss, params = seed_loss()
    print(tj.viz.to_dot(loss, params))
    print(tj.viz.to_mermaid(loss, params))
    if len(sys.argv) > 1:
        for path in write_pictures(sys.argv[1]):
            print("wrote", path)
        if not shutil.which("dot"):
            print("(Graphviz `dot` not found: no SVG; install graphviz to get one)")
