"""A printable table of a tensor's tape records (what the demo prints)."""
from tapejit import registry


def tape_table(t):
    """The records up to the one that computed ``t``, oldest first, one line each."""
    tape = t._tape
    if tape is None:
        return "(a leaf: no records)"
    tape.flush()
    return records_table(tape, tape.producer(t._dtype.arena, t._off))


def records_table(tape, end):
    """Records ``0..end`` of ``tape`` (flushed), one line each."""
    rec = tape.rec[:tape.nrec]
    lines = [f"{'#':>3}  {'op':<12} {'node':<18} {'dtype':<7} {'out':>5} {'a':>6} {'b':>6}  value"]
    for r in range(end + 1):
        code, out, a, b, p, q = (int(v) for v in rec[r])
        op = registry.OPS[code >> 1]
        d = code & 1
        node = op.node
        if op.kind == "load":
            src = tape.sources[p]
            if hasattr(src, "run_backward"):       # an output of a custom Function
                node = src.name()
            else:
                node = "AccumulateGrad" if src._rg else "(constant)"
        n = (q if op.kind == "load" else max(p, 1) if registry.elementwise_kind(op) in ("unary", "binary", "copy")
             else 1)   # a copy's p is its length too; other kernels' p is an index into ints
        value = tape.vals[d][out:out + min(n, 3)].tolist()
        shown = ", ".join(f"{v:.4g}" for v in value) + (", ..." if n > 3 else "")
        dtype = "float32" if d else "float64"
        lines.append(f"{r:>3}  {op.name:<12} {node:<18} {dtype:<7} {out:>5} {_operand(a):>6} {_operand(b) if op.operands > 1 else '-':>6}  [{shown}]")
    return "\n".join(lines)


def _operand(x):
    """An operand field: an arena offset, (offset) when it needs no gradient, - for none."""
    if x == -1:
        return "-"
    return f"{x}" if x >= 0 else f"({~x})"
