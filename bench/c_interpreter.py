"""Workload A's C switch interpreter: the peer issue 19 sets tapejit's replay against.

``c_interpreter.c`` runs the scalar graph as one record per source-level op (softplus,
the 4-term ``sum``, the product, and stack + softmax + unbind of four scalars as one
record), forward then backward, with a ``switch`` per record: the limit of a tape
interpreter that knows the workload's ops.  tapejit's frozen trace of the same graph holds
about three records per source-level op (``add_scalar`` + three ``add``s for a ``sum``,
``stack``, ``softmax`` and one ``unbind`` per read softmax output).

``program(n_ops)`` builds the records from the same loop as ``tapejit.demo.scalar_graph``,
keeping only those the output depends on (as tapejit's freezing does).  ``build()``
compiles the C file with the system compiler (``$CC``, else ``cc``, else ``gcc``) at
``-O3`` into a temporary folder, once per process, and loads it with ``ctypes``; without a
compiler it raises ``Unavailable`` and the bench row is skipped.
"""
import ctypes
import os
import shutil
import subprocess
import tempfile

import numpy as np

SOURCE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "c_interpreter.c")
SOFTPLUS, SUM4, MUL, SOFTMAX4 = range(4)
N_INPUTS = 100
FLAGS = ("-O3", "-shared", "-fPIC")

_built = {}


class Unavailable(RuntimeError):
    """No C compiler on this machine, or it failed on ``c_interpreter.c``."""


def compiler():
    """The C compiler to use, or None."""
    cc = os.environ.get("CC")
    if cc:
        return shutil.which(cc)
    return shutil.which("cc") or shutil.which("gcc")


def build():
    """``c_interpreter.c`` compiled and loaded: the ``run`` function, typed for ctypes."""
    if "run" in _built:
        return _built["run"]
    cc = compiler()
    if cc is None:
        raise Unavailable("no C compiler found ($CC, cc or gcc)")
    folder = tempfile.mkdtemp(prefix="tapejit_c_interpreter_")
    library = os.path.join(folder, "c_interpreter.so")
    done = subprocess.run([cc, *FLAGS, "-o", library, SOURCE, "-lm"], capture_output=True, text=True)
    if done.returncode != 0:
        raise Unavailable(f"{cc} {' '.join(FLAGS)} failed on {SOURCE}:\n{done.stderr.strip()}")
    run = ctypes.CDLL(library).run
    run.restype = ctypes.c_double
    run.argtypes = [ctypes.c_void_p, ctypes.c_int32, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int32,
                    ctypes.c_void_p, ctypes.c_int32, ctypes.c_int32]
    _built["run"] = run
    return run


def program(n_ops):
    """``(records, slots, root)``: workload A at ``n_ops`` as int32 records ``(op, out, a, b,
    c, d)`` over node numbers (inputs 0..99), the records the root does not depend on left
    out; ``slots`` nodes in all; ``root`` the output node (the last softmax's last result)."""
    nodes = list(range(N_INPUTS))
    records = []
    slots = N_INPUTS
    for k in range(n_ops):   # the loop of tapejit/demo.py's scalar_graph
        m = k % 4
        if m == 0:
            records.append((SOFTPLUS, slots, nodes[-10], 0, 0, 0))
            nodes.append(slots)
            slots += 1
        elif m == 1:
            records.append((SUM4, slots, *nodes[-30:-10:5]))
            nodes.append(slots)
            slots += 1
        elif m == 2:
            records.append((MUL, slots, nodes[-20], nodes[-10], 0, 0))
            nodes.append(slots)
            slots += 1
        else:
            records.append((SOFTMAX4, slots, *nodes[-4:]))
            nodes.extend(range(slots, slots + 4))
            slots += 4
    root = nodes[-1]
    needed = np.zeros(slots, bool)
    needed[root] = True
    live = []
    for record in reversed(records):
        op, out = record[0], record[1]
        width = 4 if op == SOFTMAX4 else 1
        if not needed[out:out + width].any():
            continue
        live.append(record)
        operands = {SOFTPLUS: 1, SUM4: 4, MUL: 2, SOFTMAX4: 4}[op]
        needed[list(record[2:2 + operands])] = True
    return np.ascontiguousarray(live[::-1], dtype=np.int32), slots, root


class CInterpreter:
    """Workload A at ``n_ops`` in C: ``run(x) -> (value, input gradients)`` like
    ``tj.compile(tj.value_and_grad(workloads.scalar_graph_fn(...)))``."""

    def __init__(self, n_ops):
        self._run = build()
        self.records, self.slots, self.root = program(n_ops)
        self.values = np.zeros(self.slots)
        self.adjoints = np.zeros(self.slots)
        self._fixed = (self.records.ctypes.data, len(self.records), self.values.ctypes.data,
                       self.adjoints.ctypes.data, self.slots)

    def run(self, x):
        if x.shape != (N_INPUTS,) or x.dtype != np.float64 or not x.flags.c_contiguous:
            raise ValueError(f"c interpreter: expected {N_INPUTS} contiguous float64 inputs, "
                             f"got {x.shape} {x.dtype}")
        value = self._run(*self._fixed, x.ctypes.data, N_INPUTS, self.root)
        return value, self.adjoints[:N_INPUTS].copy()
