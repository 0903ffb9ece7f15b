"""A hand-written tape interpreter for workload A: the "hand-written C" limit for replay.

SPEC.md section 5 asks that replaying workload A's traced tape runs within 1.5x of a
hand-written tape interpreter on the same flat arrays.  ``interpret`` is that
interpreter, compiled by Numba (LLVM, like C at -O3): one ``for`` loop over the records
forward and one backward, an ``if op == ...`` chain over the opcodes workload A's trace
contains (``OPS``), nothing else.  It reads and writes the frozen trace's own arrays
(the records the replay runs, ``frozen.replay_rec``, and ``tape.vals[0]``, ``tape.adj[0]``,
``tape.ints``, ``tape.floats[0]``), so it does exactly the work the replay does, minus what makes tapejit general: the
per-slot flags that let the backward sweep skip unreached records and write (not add)
the first contribution, the generated dispatch over every op of the groups, the
``freed`` checks, and Python's argument handling around the compiled call.

Instead of flags it zeroes the adjoint arena once and always adds.  That also walks
records the root does not depend on, but a frozen trace has none (``Frozen`` drops
them), so both do the same arithmetic: the checks compare every value and adjoint.
``check_trace`` refuses a trace with an op the interpreter does not implement.

Record layout (``tapejit/tape.py``): ``(opcode << 1 | float32, out, a, b, p, q)``;
operand offsets < 0 are ``~offset`` and need no gradient.  The opcodes are passed in
as an argument (``opcodes()``, read from ``tapejit.registry``), not baked in as globals:
Numba's on-disk cache would keep stale constants if tapejit renumbered its ops.
"""
import numpy as np
from numba import njit

#: the ops of workload A's frozen trace, in the order of ``interpret``'s ``ops`` argument:
#: ``add_n`` and ``stack_softmax`` are what tj.compile's frozen-tape optimisation
#: (tapejit/replay/optimize.py) makes of the sums and of the softmaxes of stacked scalars
OPS = ("load", "unbind", "softplus", "add_scalar", "add", "mul", "stack", "softmax", "add_n", "stack_softmax")


def opcodes():
    """``OPS``' opcodes in tapejit's registry, as the tuple ``interpret`` takes."""
    from tapejit import registry
    return tuple(int(registry.BY_NAME[name].opcode) for name in OPS)


def op_names(rec):
    """``{op name: record count}`` of records ``rec``."""
    from tapejit import registry
    codes, counts = np.unique(rec[:, 0] >> 1, return_counts=True)
    return {registry.OPS[int(c)].name: int(n) for c, n in zip(codes, counts)}


def check_trace(entry):
    """The frozen trace of ``tj.compile(tj.value_and_grad(f))`` for workload A is one the
    interpreter can run: float64 records only, only ``OPS``, one load (so it is the
    argument: the interpreter fills it from ``x``), and the root is the last record's
    output.  Returns ``(load offset, input size, root offset)``."""
    rec = entry.frozen.replay_rec
    names = op_names(rec)
    unknown = sorted(set(names) - set(OPS))
    if unknown:
        raise AssertionError(f"the trace holds ops the interpreter does not implement: {unknown} ({names})")
    if (rec[:, 0] & 1).any():
        raise AssertionError("the trace has float32 records: the interpreter runs float64 only")
    loads = rec[rec[:, 0] >> 1 == opcodes()[0]]
    if len(loads) != 1:
        raise AssertionError(f"expected one load record (the argument), found {len(loads)}")
    arena, root = entry.functional[0], entry.functional[1]
    if arena != 0 or root != rec[-1, 1]:
        raise AssertionError(f"the root (arena {arena}, offset {root}) is not the last record's output")
    return int(loads[0, 1]), int(loads[0, 5]), int(root)


@njit(cache=True, error_model="numpy", nogil=True)
def interpret(rec, n, v, g, ints, floats, x, root, ops):
    """Forward over ``rec[:n]`` (filling ``v``), then backward from ``root`` (into
    ``g``).  ``x`` goes into the load's slots.  Returns -1, or the index of a
    record with an opcode not in ``ops`` (then nothing after it ran)."""
    LOAD, UNBIND, SOFTPLUS, ADD_SCALAR, ADD, MUL, STACK, SOFTMAX, ADD_N, STACK_SOFTMAX = ops
    # ---- forward
    for r in range(n):
        op = rec[r, 0] >> 1
        out = rec[r, 1]
        a = rec[r, 2]
        if a < 0:
            a = ~a
        b = rec[r, 3]
        if b < 0:
            b = ~b
        p = rec[r, 4]
        q = rec[r, 5]
        if op == UNBIND:                 # copy p values from a + b (b: start, not an operand)
            for i in range(p):
                v[out + i] = v[a + b + i]
        elif op == ADD:                  # q: bit 0 / bit 1 = operand a / b broadcast
            sa = 1 - (q & 1)
            sb = 1 - ((q >> 1) & 1)
            for i in range(p):
                v[out + i] = v[a + i * sa] + v[b + i * sb]
        elif op == SOFTPLUS:             # beta, threshold = floats[q], floats[q + 1]
            beta = floats[q]
            threshold = floats[q + 1]
            for i in range(p):
                xi = v[a + i]
                if xi * beta > threshold:
                    v[out + i] = xi
                else:
                    v[out + i] = np.log1p(np.exp(xi * beta)) / beta
        elif op == ADD_SCALAR:
            c = floats[q]
            for i in range(p):
                v[out + i] = v[a + i] + c
        elif op == MUL:
            sa = 1 - (q & 1)
            sb = 1 - ((q >> 1) & 1)
            for i in range(p):
                v[out + i] = v[a + i * sa] * v[b + i * sb]
        elif op == STACK:                # ints[p:]: k, outer, (operand, inner) * k
            k = ints[p]
            o = out
            for row in range(ints[p + 1]):
                for j in range(k):
                    src = ints[p + 2 + 2 * j]
                    if src < 0:
                        src = ~src
                    inner = ints[p + 3 + 2 * j]
                    for i in range(inner):
                        v[o + i] = v[src + row * inner + i]
                    o += inner
        elif op == SOFTMAX:              # ints[p:p+3]: outer, length, inner
            if q != 0:
                return r                 # log_softmax shares the opcode's kernel: not here
            length = ints[p + 1]
            inner = ints[p + 2]
            for o in range(ints[p]):
                for kk in range(inner):
                    base = o * length * inner + kk
                    m = v[a + base]
                    for j in range(1, length):
                        m = max(m, v[a + base + j * inner])
                    s = 0.0
                    for j in range(length):
                        s += np.exp(v[a + base + j * inner] - m)
                    for j in range(length):
                        v[out + base + j * inner] = np.exp(v[a + base + j * inner] - m) / s
        elif op == ADD_N:                # ints[p:]: k, n, operand * k; q: floats index of a start, or -1
            k = ints[p]
            for i in range(ints[p + 1]):
                src = ints[p + 2]
                s = v[(~src if src < 0 else src) + i]
                if q >= 0:
                    s = floats[q] + s
                for j in range(1, k):
                    src = ints[p + 2 + j]
                    s = s + v[(~src if src < 0 else src) + i]
                v[out + i] = s
        elif op == STACK_SOFTMAX:        # ints[p:]: k, 1, (operand, n) * k; softmax along the k
            k = ints[p]
            length = ints[p + 3]
            for i in range(length):
                src = ints[p + 2]
                m = v[(~src if src < 0 else src) + i]
                for j in range(1, k):
                    src = ints[p + 2 + 2 * j]
                    m = max(m, v[(~src if src < 0 else src) + i])
                s = 0.0
                for j in range(k):
                    src = ints[p + 2 + 2 * j]
                    s += np.exp(v[(~src if src < 0 else src) + i] - m)
                for j in range(k):
                    src = ints[p + 2 + 2 * j]
                    v[out + j * length + i] = np.exp(v[(~src if src < 0 else src) + i] - m) / s
        elif op == LOAD:                 # the argument: q values
            for i in range(q):
                v[out + i] = x[i]
        else:
            return r
    # ---- backward: zero the adjoints once, seed the root, add every contribution
    for i in range(g.shape[0]):
        g[i] = 0.0
    g[root] = 1.0
    for r in range(n - 1, -1, -1):
        op = rec[r, 0] >> 1
        out = rec[r, 1]
        a = rec[r, 2]
        b = rec[r, 3]
        p = rec[r, 4]
        q = rec[r, 5]
        if op == UNBIND:
            if a >= 0:
                start = a + ~b if b < 0 else a + b
                for i in range(p):
                    g[start + i] += g[out + i]
        elif op == ADD:
            sa = 1 - (q & 1)
            sb = 1 - ((q >> 1) & 1)
            for i in range(p):
                go = g[out + i]
                if a >= 0:
                    g[a + i * sa] += go
                if b >= 0:
                    g[b + i * sb] += go
        elif op == SOFTPLUS:
            if a >= 0:
                beta = floats[q]
                threshold = floats[q + 1]
                for i in range(p):
                    xi = v[a + i]
                    if xi * beta > threshold:
                        g[a + i] += g[out + i]
                    else:
                        z = np.exp(xi * beta)
                        g[a + i] += g[out + i] * z / (z + 1.0)
        elif op == ADD_SCALAR:
            if a >= 0:
                for i in range(p):
                    g[a + i] += g[out + i]
        elif op == MUL:
            sa = 1 - (q & 1)
            sb = 1 - ((q >> 1) & 1)
            xa = ~a if a < 0 else a
            xb = ~b if b < 0 else b
            for i in range(p):
                go = g[out + i]
                if a >= 0:
                    g[a + i * sa] += go * v[xb + i * sb]
                if b >= 0:
                    g[b + i * sb] += go * v[xa + i * sa]
        elif op == STACK:
            k = ints[p]
            outer = ints[p + 1]
            width = 0
            for j in range(k):
                width += ints[p + 3 + 2 * j]
            col = 0
            for j in range(k):
                src = ints[p + 2 + 2 * j]
                inner = ints[p + 3 + 2 * j]
                if src >= 0:
                    for row in range(outer):
                        for i in range(inner):
                            g[src + row * inner + i] += g[out + row * width + col + i]
                col += inner
        elif op == SOFTMAX:
            if a >= 0:
                length = ints[p + 1]
                inner = ints[p + 2]
                for o in range(ints[p]):
                    for kk in range(inner):
                        base = o * length * inner + kk
                        s = 0.0
                        for j in range(length):
                            at = out + base + j * inner
                            s += g[at] * v[at]
                        for j in range(length):
                            at = base + j * inner
                            g[a + at] += v[out + at] * (g[out + at] - s)
        elif op == ADD_N:
            for j in range(ints[p]):
                src = ints[p + 2 + j]
                if src >= 0:
                    for i in range(ints[p + 1]):
                        g[src + i] += g[out + i]
        elif op == STACK_SOFTMAX:        # as tapejit's kernel: each input's gradient over the result's adjoint
            k = ints[p]
            length = ints[p + 3]
            for i in range(length):
                s = 0.0
                for j in range(k):
                    at = out + j * length + i
                    s += g[at] * v[at]
                for j in range(k):
                    at = out + j * length + i
                    g[at] = v[at] * (g[at] - s)
            for j in range(k):
                src = ints[p + 2 + 2 * j]
                if src >= 0:
                    for i in range(length):
                        g[src + i] += g[out + j * length + i]
        elif op == LOAD:
            pass
        else:
            return r
    return -1


class Interpreter:
    """``interpret`` bound to one frozen trace of workload A: ``run(x) -> (value, grads)``
    like the compiled ``tj.value_and_grad``, computed on the trace's own arrays."""

    def __init__(self, entry):
        self.x_at, self.size, self.root = check_trace(entry)
        self.tape = entry.frozen.tape
        self.rec = entry.frozen.replay_rec
        self.ops = opcodes()

    def run(self, x):
        if x.shape != (self.size,) or x.dtype != np.float64:
            raise ValueError(f"interpreter: expected {self.size} float64 inputs, got {x.shape} {x.dtype}")
        t = self.tape
        r = interpret(self.rec, len(self.rec), t.vals[0], t.adj[0], t.ints, t.floats[0], x, self.root, self.ops)
        if r >= 0:
            raise RuntimeError(f"interpreter: record {r} has an op it does not implement")
        return float(t.vals[0][self.root]), t.adj[0][self.x_at:self.x_at + self.size].copy()
