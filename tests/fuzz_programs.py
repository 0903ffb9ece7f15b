"""Random straight-line tensor programs for tests/test_fuzz_torch.py.

A program is a list of Python statements over one library name ``L`` (``torch`` or
``tapejit``), ``F`` (``L.nn.functional``) and ``np``: leaves made from seeded NumPy arrays,
then ops, then a scalar loss and ``loss.backward()``.  The same text runs in both libraries,
so a failing program prints as source anyone can paste.

The generator runs each statement in torch as it draws it: torch's values and shapes
decide what the next op may be (operands that broadcast, dims that exist, guards that keep
values in a well-conditioned range), and a statement torch refuses ends the program (the
test then wants tapejit to refuse it too, with the same exception type).
"""
import math
import re
import warnings

import numpy as np
from hypothesis import strategies as st

#: Mismatches already filed (issue 14) or found by this fuzzer, each kept out of the
#: generated programs (as narrowly as the generator can) so the fuzzer finds other bugs.
#: Remove an entry once its fix is merged: the generator then makes those programs again
#: (``TAPEJIT_FUZZ_UNEXCLUDE=name,...`` tries that without editing this set).
KNOWN_BUGS = {
    # ---- torch raises where tapejit computes ---------------------------------------------
    # An in-place op or setitem whose operand partly overlaps its target in memory
    # (x[1:].add_(x[:2]), v[None] = v for a v of one element): torch refuses ("unsupported
    # operation: some elements of the input tensor and the written-to tensor refer to a
    # single memory location"); so does tapejit's copy_, and y.mul_(y) raises at backward
    # in both, but other ops and setitem compute.
    "inplace_overlapping_operand",
    # Reading an output of split/chunk/unbind after an in-place change of its base: torch
    # raises ("Output 0 of SplitBackward0 is a view and its base or another view of its
    # base has been modified inplace..."), tapejit's output takes the new values.  (An
    # in-place op on such an output raises in both.)
    "split_output_inplace",

    # ---- values silently wrong ---------------------------------------------------------------
    # A view of a detached alias (or of its source) keeps its old elements after an in-place
    # op on the other one: torch's views read the shared storage.
    #   y = x.exp(); d = y.detach().requires_grad_(); v = d.t(); y.add_(2); v -> torch y's new value
    "alias_views_stale",

    # ---- raised at another time ------------------------------------------------------------
    # fill_/zero_ of an expanded view (overlapping memory): torch fills and raises at
    # backward (CopySlices: "unsupported operation: more than one element of the
    # written-to tensor refers to a single memory location"), tapejit raises at the fill_.
    "fill_on_expanded_raises_early",

    # ---- an in-place change of a saved value not detected ----------------------------------
    # (torch raises "one of the variables needed for gradient computation has been
    # modified by an inplace operation" at backward; tapejit's gradient is that of the
    # values before the change)
    # An operand promoted by a binary op that keeps it (minimum(f32, f64)): tapejit keeps the
    # cast copy, which no record marks as the operand's (a user's .double() is a copy in
    # torch too, and the two are one record here).
    #   b = a * 1; y = minimum(b, w64); b.mul_(2); y.sum().backward()
    "converted_operand_write_not_versioned",
}
# Not generated at all, so they need no entry: infinite inputs (issue 14 item 5,
# logsumexp of all -inf/+inf), and the -0.0 of relu(-1) (item 7): every division and
# negative power here reads a guarded operand (|x| + c), never a relu's exact zero.

FLOAT_DTYPES = ("float32", "float64")


def broadcast_shape(a, b):
    """The broadcast of shapes ``a`` and ``b``, or None."""
    out = []
    for i in range(1, max(len(a), len(b)) + 1):
        x = a[-i] if i <= len(a) else 1
        y = b[-i] if i <= len(b) else 1
        if x != y and x != 1 and y != 1:
            return None
        out.append(y if x == 1 else x)
    return tuple(reversed(out))


def source(lines, lib):
    """The program as source for ``lib`` ("torch" or "tapejit")."""
    alias = "torch" if lib == "torch" else "tj"
    head = ["import numpy as np",
            "import torch" if lib == "torch" else "import tapejit as tj",
            f"F = {alias}.nn.functional"]
    return "\n".join(head + [re.sub(r"\bL\.", alias + ".", line) for line in lines])


def hypothesis_integers(data):
    """A ``Builder`` draw function over hypothesis' ``st.data()``."""
    return lambda lo, hi: data.draw(st.integers(lo, hi))


class Ended(Exception):
    """Raised by a builder step that ends the program (torch refused a statement)."""


class Builder:
    """Draws a program statement by statement, running each in torch.

    ``focus`` weights the op kinds (a key of ``FOCUS``); ``big`` makes the leaves
    65,536-200,000 elements (the chunked runs) and keeps to the ops that run on them;
    ``known_bugs`` are the KNOWN_BUGS entries to keep out."""

    KINDS = ("unary", "scalar", "binary", "reduce", "shape", "index", "setitem", "inplace",
             "detach", "cast", "catstack", "split")
    FOCUS = {
        #            un sc bi re sh ix si ip de ca cs sp
        "elementwise": (6, 4, 8, 1, 1, 1, 0, 1, 1, 1, 1, 0),
        "reductions": (3, 2, 3, 8, 2, 1, 0, 1, 0, 0, 1, 1),
        "shapes": (2, 1, 3, 2, 8, 2, 0, 1, 0, 1, 3, 3),
        "indexing": (2, 1, 3, 1, 2, 8, 3, 1, 0, 0, 1, 1),
        "inplace": (2, 1, 3, 1, 2, 2, 3, 8, 2, 0, 1, 1),
        "chunked": (6, 4, 6, 1, 0, 2, 1, 2, 0, 0, 0, 0),
    }
    #: chance that an op is one torch refuses (about one program in twenty)
    ERROR_RATE = 0.01

    def __init__(self, draw, focus, big=False, known_bugs=KNOWN_BUGS):
        """``draw(lo, hi)`` gives an integer in [lo, hi]: hypothesis' draws in the tests
        (see ``hypothesis_integers``), ``random.Random.randint`` for a quick sweep."""
        import torch
        self.torch = torch
        self.integer = draw
        self.weights = self.FOCUS[focus]
        self.big = big
        self.known = known_bugs
        self.lines = []
        self.ns = {"L": torch, "np": np, "F": torch.nn.functional}
        self.names = []          # tensors the program made, in order
        self.detached = set()    # names of detached aliases (and views of them)
        self.parent = {}         # a view's name -> the name it is a view of
        # torch storages (data_ptr) that a KNOWN_BUGS entry keeps in-place ops away from:
        # flag -> storages
        self.guarded = {}
        #: storages whose root came to require grad by an in-place write: torch's views of
        #: them made before keep a stale grad_fn, so an in-place op on one raises "a leaf
        #: Variable that requires grad..." unless its grad_fn was read (a torch quirk)
        self.grad_by_write = set()
        self.aliased = set()     # storages with a detached alias (KNOWN_BUGS alias_views_stale)
        self.expanded = set()    # names made by expand/expand_as/broadcast_to
        self.count = 0
        self.error_line = None   # index of the statement torch refused
        self.error = None

    # ---- drawing helpers ---------------------------------------------------------------

    def boolean(self, p=0.5):
        """True with probability about ``p``: a draw in a band inside the range, away from
        the ends hypothesis favours (it shrinks to False)."""
        return 50000 <= self.integer(0, 199999) < 50000 + int(p * 100000)

    def choice(self, options):
        """One of ``options``, near uniformly (hypothesis' draws favour the ends of a small
        range; a wide one spreads them), shrinking to the first."""
        options = list(options)
        return options[self.integer(0, 99999) * len(options) // 100000]

    def fresh(self):
        name = f"v{self.count}"
        self.count += 1
        return name

    def t(self, name):
        return self.ns[name]

    def run(self, line, new=()):
        """Append ``line`` and run it in torch; ``new`` are the tensor names it binds."""
        self.lines.append(line)
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                exec(line, self.ns)
        except Exception as e:   # noqa: BLE001  (any refusal ends the program)
            self.error_line = len(self.lines) - 1
            self.error = e
            raise Ended() from None
        for n in new:
            if isinstance(self.ns.get(n), self.torch.Tensor):
                self.names.append(n)

    def floats(self):
        """Names of floating tensors, the most recent first."""
        return [n for n in reversed(self.names) if self.t(n).is_floating_point()]

    def pick(self, pred=None):
        cands = [n for n in self.floats() if pred is None or pred(self.t(n))]
        if not cands:
            return None
        # Most recent first: shrinking moves towards the latest value.
        return cands[min(self.integer(0, len(cands) - 1), self.integer(0, len(cands) - 1))]

    def absmax(self, name_or_tensor):
        t = self.t(name_or_tensor) if isinstance(name_or_tensor, str) else name_or_tensor
        if t.numel() == 0:
            return 0.0
        return float(t.detach().abs().max())

    def absmin(self, name):
        t = self.t(name)
        if t.numel() == 0:
            return math.inf
        return float(t.detach().abs().min())

    #: values this close (relative) but not equal may order differently in the two
    #: libraries' rounding: a max/min/argmax/clamp/relu there is not a fair check
    NEAR = 1e-5

    def near(self, x, y):
        """Whether some elements of ``x`` and ``y`` (broadcast) differ, but by a rounding."""
        torch = self.torch
        x, y = (u.detach().double() if isinstance(u, torch.Tensor) else torch.tensor(float(u), dtype=torch.float64)
                for u in (x, y))
        gap = (x - y).abs()
        scale = torch.maximum(x.abs(), y.abs()).clamp(min=1.0)
        # An exact tie counts too unless the value is a short binary fraction (k / 1024),
        # which both libraries compute exactly; a computed value that ties in torch may
        # not tie in tapejit.
        inexact = (x * 1024 != (x * 1024).round())
        return bool(((gap <= self.NEAR * scale) & ((gap > 0) | inexact)).any())

    def near_tie(self, t, dims):
        """Whether ``t`` has two values, in one slice along ``dims`` (None: all), that differ by
        a rounding."""
        v = t.detach().double()
        if v.numel() < 2:
            return False
        if dims is None or v.dim() == 0:
            v = v.reshape(1, -1)
        else:
            dims = sorted(d % v.dim() for d in dims)
            kept = [d for d in range(v.dim()) if d not in dims]
            v = v.permute(*kept, *dims).reshape(-1, math.prod(t.shape[d] for d in dims))
        if v.shape[-1] < 2:
            return False
        return self.near(v.sort(-1).values[..., 1:], v.sort(-1).values[..., :-1])

    def positive(self, name):
        t = self.t(name)
        return t.numel() > 0 and float(t.detach().min()) > 0

    def bounded(self, name, limit):
        """``name``, clamped into [-limit, limit] if its values leave it (or are not finite)."""
        m = self.absmax(name)
        if m <= limit:
            return name
        return f"{name}.clamp({-limit}, {limit})"

    def scalar(self, nonzero=False):
        options = [2, -1, 3, 0.5, -1.5, 0.25, 1, 2.5, -0.75] + ([] if nonzero else [0, 0.0])
        return self.choice(options)

    # ---- leaves --------------------------------------------------------------------------

    def dtype(self):
        if self.program_dtype == "mixed":
            return self.choice(FLOAT_DTYPES)
        return self.program_dtype

    def values(self, shape):
        seed = self.integer(0, 999)
        kind = self.integer(0, 2)
        if kind == 0:   # on a grid of eighths: ties, exact zeros, kinks
            return f"np.random.default_rng({seed}).integers(-16, 17, {shape}) / 8"
        if kind == 1:
            return f"np.random.default_rng({seed}).uniform(-2, 2, {shape}).round(3)"
        return f"np.random.default_rng({seed}).integers(-2, 3, {shape}) / 2"

    def leaf(self, shape, dtype=None, rg=None):
        name = self.fresh()
        dtype = dtype or self.dtype()
        if rg is None:
            rg = not self.boolean(0.25)
        grad = ", requires_grad=True" if rg else ""
        self.run(f"{name} = L.tensor({self.values(shape)}, dtype=L.{dtype}{grad})", [name])
        return name

    def int_leaf(self, shape):
        name = self.fresh()
        seed = self.integer(0, 999)
        self.run(f"{name} = L.tensor(np.random.default_rng({seed}).integers(-3, 4, {shape}))", [name])
        return name

    def base_shape(self):
        if self.big:
            if self.boolean(0.5):
                return (self.integer(65536, 200000),)
            cols = self.choice([2, 3, 8, 100, 257, 512])
            return (self.integer(65536 // cols + 1, 200000 // cols), cols)
        ndim = self.choice([0, 1, 1, 2, 2, 2, 3, 3, 4])
        sizes = [1, 2, 3, 4, 5, 2, 3]
        shape = [self.choice(sizes) for _ in range(ndim)]
        if ndim and self.boolean(0.04):
            shape[self.integer(0, ndim - 1)] = 0
        return tuple(shape)

    def compatible_shape(self, shape):
        """A shape that broadcasts with ``shape``: some leading dims dropped, some set to 1,
        sometimes a new leading dim."""
        shape = list(shape)
        if self.big:
            options = [tuple(shape), (), (1,) * len(shape)]
            if len(shape) == 2:
                options += [(shape[1],), (shape[0], 1)]
            return self.choice(options)
        drop = self.integer(0, len(shape)) if shape and self.boolean(0.3) else 0
        shape = shape[drop:]
        shape = [1 if self.boolean(0.25) else s for s in shape]
        if not drop and self.boolean(0.1) and len(shape) < 4:
            shape = [self.choice([1, 2, 3])] + shape
        return tuple(shape)

    # ---- the program ---------------------------------------------------------------------

    def build(self, threads=None):
        """Draw the whole program; returns self (``error_line`` set if torch refused)."""
        try:
            if threads is not None:
                self.run(f"L.set_num_threads({threads})")
            self.program_dtype = self.choice(["float64", "float32", "float64", "float32", "mixed"])
            base = self.base_shape()
            n_leaves = self.integer(1, 3)
            self.leaf(base)
            for _ in range(n_leaves - 1):
                self.leaf(self.compatible_shape(base))
            if not self.big and self.boolean(0.3):
                self.int_leaf(self.compatible_shape(base))
            n_ops = self.integer(3, 12)
            done = 0
            tries = 0
            while done < n_ops and tries < 4 * n_ops:
                tries += 1
                kind = "error" if not self.big and self.boolean(self.ERROR_RATE) else self.kind()
                if getattr(self, "op_" + kind)() is not False:
                    done += 1
            self.loss()
        except Ended:
            pass
        return self

    def kind(self):
        total = sum(self.weights)
        r = self.integer(0, total - 1)
        for kind, w in zip(self.KINDS, self.weights):
            if r < w:
                return kind
            r -= w
        raise AssertionError

    def loss(self):
        """``loss`` = a weighted sum of the last value and some others; then backward."""
        outs = self.floats()
        # The latest value that requires grad first (else backward has nothing to do).
        outs.sort(key=lambda n: not self.t(n).requires_grad)
        chosen = [outs[0]] + [n for n in outs[1:] if self.boolean(0.3)]
        terms = []
        for n in chosen:
            t = self.t(n)
            dt = str(t.dtype).split(".")[1]
            form = self.integer(0, 3) if self.big else 0
            if form == 1:
                terms.append(f"{n}.sum()")
            elif form == 2:
                terms.append(f"{n}.mean()")
            else:
                seed = self.integer(0, 999)
                w = f"np.random.default_rng({seed}).uniform(-1, 1, {tuple(t.shape)}).round(2)"
                terms.append(f"({n} * L.tensor({w}, dtype=L.{dt})).sum()")
        self.run("loss = " + " + ".join(terms), ["loss"])
        self.run("loss.backward()")

    # ---- op kinds: each returns False when it does not apply -----------------------------

    def op_unary(self):
        a = self.pick()
        if a is None:
            return False
        t = self.t(a)
        nd = t.dim()
        forms = [
            lambda: f"L.exp({self.bounded(a, 10)})",
            lambda: f"{self.bounded(a, 10)}.exp()",
            lambda: f"L.expm1({self.bounded(a, 10)})",
            lambda: (f"L.log({a})" if self.absmin(a) >= 0.1 and self.positive(a)
                     else f"L.log({a}.abs() + {self.choice([0.5, 0.25, 1])})"),
            lambda: f"L.log1p({a}.abs())",
            lambda: (f"L.sqrt({a}.abs())" if self.boolean(0.1)
                     else f"{a}.abs().add(0.25).sqrt()" if self.boolean(0.5)
                     else f"L.sqrt({a}.abs() + 0.25)"),
            lambda: f"L.rsqrt({a}.abs() + 0.5)",
            lambda: f"L.tanh({a})", lambda: f"{a}.tanh()",
            lambda: f"L.sigmoid({a})", lambda: f"{a}.sigmoid()",
            lambda: f"L.relu({a})", lambda: f"{a}.relu()", lambda: f"F.relu({a})",
            lambda: f"{a}.abs()", lambda: f"abs({a})", lambda: f"L.abs({a})",
            lambda: f"-{a}", lambda: f"L.neg({a})",
            lambda: f"L.sin({a})", lambda: f"{a}.cos()",
            lambda: f"L.tan({a}.tanh())",
            lambda: f"L.erf({a})", lambda: f"{a}.sign()",
            lambda: f"F.softplus({a})", lambda: f"F.softplus({a}, beta=2.0, threshold=3.0)",
            lambda: f"F.gelu({a})", lambda: f"F.silu({a})", lambda: f"F.elu({a})",
            lambda: f"F.leaky_relu({a}, 0.1)",
            lambda: f"{a}.clamp({self.clamp_args()})",
            lambda: f"L.clamp({a}, min={self.choice([-1.0, 0.0, 0.5])})",
            lambda: f"{a}.clamp_min({self.choice([-0.5, 0.0, 1])})",
            lambda: f"{a}.clamp_max({self.choice([-0.5, 0.0, 1])})",
            lambda: f"{a}.square()", lambda: f"{self.bounded(a, 100)} ** 2",
            lambda: f"{self.bounded(a, 30)} ** 3",
            lambda: f"({self.bounded(a, 100)}.abs() + 0.5) ** -1.5",
            lambda: f"({self.bounded(a, 100)}.abs() + 0.25) ** 0.5",
            lambda: f"2.0 ** {self.bounded(a, 10)}",
            lambda: f"{a} ** 0", lambda: f"{a} ** 1", lambda: f"L.pow({self.bounded(a, 30)}, 3)",
            lambda: f"{a}.clone()",
            lambda: f"L.softmax({a}, {self.dim(nd)})", lambda: f"{a}.log_softmax({self.dim(nd)})",
        ]
        expr = self.choice(forms)()
        kinks = [0.0] if re.search(r"relu|abs\(\)\)|sign\(|leaky", expr) or expr.startswith("abs(") \
            or re.match(r"(L\.abs|F\.relu|L\.relu)", expr) else []
        kinks += [float(v) for v in re.findall(r"(?:min|max)=(-?[\d.]+)", expr)]
        kinks += [float(v) for v in re.findall(r"clamp_(?:min|max)\((-?[\d.]+)\)", expr)]
        if any(self.near(t, k) for k in kinks):
            return False
        name = self.fresh()
        self.run(f"{name} = {expr}", [name])

    def clamp_args(self):
        lo = self.choice([-1.0, -0.5, 0.0, None])
        hi = self.choice([0.0, 0.5, 1.0, 1.5, None])
        if lo is None and hi is None:
            lo = 0.0
        if lo is not None and hi is not None and lo > hi:
            lo, hi = hi, lo
        return ", ".join([f"min={lo}"] * (lo is not None) + [f"max={hi}"] * (hi is not None))

    def dim(self, nd, allow_extra=False):
        """A valid dim for a tensor of ``nd`` dims (negative or not); 0-d takes 0 or -1."""
        n = nd + 1 if allow_extra else max(nd, 1)
        return self.integer(-n, n - 1)

    def op_scalar(self):
        a = self.pick()
        if a is None:
            return False
        s = self.scalar()
        nz = self.scalar(nonzero=True)
        forms = [f"{a} + {s}", f"{s} + {a}", f"{a} - {s}", f"{s} - {a}", f"{a} * {s}", f"{s} * {a}",
                 f"{a} / {nz}", f"{nz} / ({a}.abs() + 0.5)", f"L.add({a}, {s})", f"L.mul({a}, {s})",
                 f"{a}.sub({s})", f"{a}.div({nz})", f"L.add({a}, {s}, alpha={nz})",
                 f"L.maximum({a}, L.tensor({float(s)}, dtype={a}.dtype))",
                 f"L.where({a} > 0, {a}, {s})" if self.t(a).is_leaf else f"{a} * {s}"]
        name = self.fresh()
        self.run(f"{name} = {self.choice(forms)}", [name])

    def operand(self, shape, into=None):
        """A second operand for a value of ``shape``: a tensor that broadcasts with it (onto
        exactly ``into`` for an in-place op), a new leaf, or a Python scalar."""
        if into is not None:
            ok = lambda t: broadcast_shape(tuple(t.shape), into) == into  # noqa: E731
        else:
            # (no outer product of two large vectors: (n,) with (n, 1) is n * n elements)
            ok = lambda t: broadcast_shape(tuple(t.shape), shape) is not None and math.prod(  # noqa: E731
                broadcast_shape(tuple(t.shape), shape)) <= 2 * max(math.prod(shape), t.numel(), 64)
        ints = [n for n in self.names if self.t(n).dtype == self.torch.int64 and ok(self.t(n))]
        if ints and self.boolean(0.3):
            return self.choice(ints)   # torch's promotion: int64 with a float tensor
        way = self.integer(0, 4)
        if way == 0:
            return repr(self.scalar())
        if way in (1, 2):
            b = self.pick(ok)
            if b is not None:
                return b
        if way == 3 and not self.big:
            return self.leaf((), rg=self.boolean(0.5))
        target = into if into is not None else shape
        new = self.compatible_shape(target)
        if into is not None:
            new = new[-len(into):] if into else ()
        return self.leaf(new)

    def op_binary(self):
        a = self.pick()
        if a is None:
            return False
        ta = self.t(a)
        b = self.operand(tuple(ta.shape))
        op = self.integer(0, 15)
        product = None   # the operands of a mul or div
        if op == 0:
            expr = f"{a} + {b}"
        elif op == 1:
            expr = f"L.add({a}, {b})" if self.boolean() else f"{a}.add({b}, alpha=2)"
        elif op == 2:
            expr = f"{a} - {b}" if self.boolean() else f"L.sub({a}, {b})"
        elif op in (3, 4):
            product = (a, b)
            expr = f"{a} * {b}" if self.boolean() else f"L.mul({a}, {b})"
        elif op in (5, 6):
            product = (a, self.denominator(b))
            expr = f"{a} / {product[1]}"
        elif op == 7:
            product = (self.denominator(b), self.denominator(a))
            expr = f"L.div({product[0]}, {product[1]})" if self.boolean(0.5) else f"{product[0]} / {product[1]}"
        elif op == 8:
            base = a if self.absmin(a) >= 0.25 and self.absmax(a) <= 10 and self.positive(a) \
                else f"({self.bounded(a, 10)}.abs() + 0.5)"
            expo = self.bounded(b, 3) if b in self.ns else b
            expr = f"{base} ** {expo}" if self.boolean() else f"L.pow({base}, {expo})"
        elif op in (9, 10):
            expr = f"L.maximum({a}, {self.as_tensor(b, ta)})"
        elif op in (11, 12):
            expr = f"L.minimum({a}, {self.as_tensor(b, ta)})" if self.boolean() else \
                f"L.min({a}, {self.as_tensor(b, ta)})"
        else:
            expr = f"L.where({self.condition(tuple(ta.shape))}, {a}, {b})"
        tb = self.t(b) if b in self.ns else None
        if op in (9, 10, 11, 12):
            other = tb if tb is not None else float(eval(b))
            if self.near(ta, other):
                return False
        name = self.fresh()
        self.run(f"{name} = {expr}", [name])
        out = self.t(name)
        for x in (a, b):
            u = self.t(x) if x in self.ns else None
            if u is not None and u.dtype != out.dtype:
                self.guard("converted_operand_write_not_versioned", u)

    def as_tensor(self, b, like):
        if b in self.ns:
            return b
        return f"L.tensor({float(eval(b))}, dtype={self.name_of(like)}.dtype)"

    def name_of(self, t):
        for n in self.names:
            if self.ns[n] is t:
                return n
        raise KeyError

    def denominator(self, b):
        """``b`` as a divisor far from zero."""
        if b not in self.ns:
            return b if float(eval(b)) != 0 else "2"
        if self.absmin(b) >= 0.25 and self.absmax(b) <= 1e4:
            return b
        return f"({self.bounded(b, 100)}.abs() + 0.5)"

    def condition(self, shape):
        """A boolean tensor that broadcasts with ``shape``: a fixed mask, or a comparison of
        a leaf (exact in both libraries)."""
        leaves = [n for n in self.floats() if self.t(n).is_leaf and self.t(n).grad_fn is None
                  and n not in self.detached and broadcast_shape(tuple(self.t(n).shape), shape) is not None]
        if leaves and self.boolean(0.5):
            return f"{self.choice(leaves)} > {self.choice([0, 0.5, -0.25])}"
        seed = self.integer(0, 999)
        return f"L.tensor(np.random.default_rng({seed}).random({self.compatible_shape(shape)}) < 0.5)"

    def op_reduce(self):
        a = self.pick()
        if a is None:
            return False
        t = self.t(a)
        nd = t.dim()
        shape = tuple(t.shape)
        which = self.choice(["sum", "mean", "prod", "max", "min", "amax", "amin", "logsumexp", "norm",
                             "var", "std", "argmax", "sum", "mean", "max"])
        keep = self.boolean(0.3)
        kd = ", keepdim=True" if keep else ""
        full = self.boolean(0.35)
        d = self.dim(nd)
        dims = None
        if nd >= 2 and self.boolean(0.3):
            dims = tuple(sorted({self.integer(0, nd - 1) for _ in range(2)}))
        if which in ("max", "min", "amax", "amin", "argmax") and t.is_floating_point() and self.near_tie(
                t, None if full else (dims if dims and which in ("amax", "amin") else (d,))):
            return False
        name = self.fresh()
        if which in ("max", "min"):
            if full:
                self.run(f"{name} = {a}.{which}()", [name])
            else:
                idx = self.fresh()
                form = self.integer(0, 2)
                if form == 0:
                    self.run(f"{name}, {idx} = L.{which}({a}, dim={d}{kd})", [name, idx])
                elif form == 1:
                    self.run(f"{name} = {a}.{which}({d}{kd}).values", [name])
                else:
                    self.run(f"{name} = {a}.{which}(dim={d}{kd})[0]", [name])
            return
        if which in ("amax", "amin"):
            arg = "" if full else f"dim={dims if dims else d}{kd}"
            self.run(f"{name} = L.{which}({a}{', ' + arg if arg else ''})", [name])
            return
        if which == "argmax":
            fn = self.choice(["argmax", "argmin"])
            self.run(f"{name} = {a}.{fn}()" if full else f"{name} = {a}.{fn}(dim={d}{kd})", [name])
            return
        if which == "prod":
            src = a
            if self.absmax(a) > 1.5:
                src = f"{a}.clamp(-1.5, 1.5)"
            self.run(f"{name} = {src}.prod()" if full else f"{name} = {src}.prod({d}{kd})", [name])
            return
        if which in ("sum", "mean"):
            if full:
                expr = self.choice([f"{a}.{which}()", f"L.{which}({a})"])
            else:
                expr = f"{a}.{which}({dims if dims else d}{kd})"
            self.run(f"{name} = {expr}", [name])
            return
        if which == "logsumexp":
            self.run(f"{name} = L.logsumexp({a}, {dims if dims else d}{kd})", [name])
            return
        if which == "norm":
            p = self.choice(["", "p=1", "p=3", "p=2", "p='fro'"])
            if p == "p=1" and self.near(t, 0.0):
                return False
            args = [p] if p else []
            if not full:
                args.append(f"dim={dims if dims and p != 'p=3' else d}")
                if keep:
                    args.append("keepdim=True")
            self.run(f"{name} = {a}.norm({', '.join(args)})", [name])
            return
        # var / std
        corr = self.choice(["", "unbiased=False", "correction=0", "correction=2"])
        rd = None if full else (dims if dims else (d,))
        args = [corr] if corr else []
        if not full:
            args.insert(0, f"dim={dims if dims else d}")
            if keep:
                args.append("keepdim=True")
        self.run(f"{name} = {a}.{which}({', '.join(args)})", [name])

    def reshaped(self, shape):
        """A shape with the same number of elements (maybe with one -1)."""
        n = math.prod(shape)
        factors = []
        m = n
        p = 2
        while m > 1 and p * p <= m:
            while m % p == 0:
                factors.append(p)
                m //= p
            p += 1
        if m > 1:
            factors.append(m)
        nd = self.integer(0 if n == 1 else 1, 4)
        if n == 0:
            nd = max(nd, 1)
        out = [1] * nd
        for f in factors:
            out[self.integer(0, nd - 1)] *= f
        if n == 0:
            out[self.integer(0, nd - 1)] = 0
        elif nd and self.boolean(0.3):
            out[self.integer(0, nd - 1)] = -1
        return tuple(out)

    def op_shape(self):
        a = self.pick()
        if a is None:
            return False
        t = self.t(a)
        nd = t.dim()
        shape = tuple(t.shape)
        f = self.integer(0, 12)
        if f == 0:
            new = self.reshaped(shape)
            expr = self.choice([f"{a}.reshape({new})", f"L.reshape({a}, {new})",
                                f"{a}.reshape{new}" if new else f"{a}.reshape(())"])
        elif f == 1:
            new = self.reshaped(shape)
            expr = f"{a}.view({new})" if self.view_allowed(t) else f"{a}.reshape({new})"
        elif f == 2:
            expr = f"{a}.flatten({self.dim(nd)}, -1)" if nd and self.boolean() else f"L.flatten({a})"
            if nd >= 2 and self.boolean():
                s, e = sorted((self.integer(0, nd - 1), self.integer(0, nd - 1)))
                expr = f"{a}.flatten({s}, {e})"
        elif f == 3:
            expr = f"{a}.transpose({self.dim(nd)}, {self.dim(nd)})"
        elif f == 4:
            perm = list(range(nd))
            for i in range(nd - 1, 0, -1):
                j = self.integer(0, i)
                perm[i], perm[j] = perm[j], perm[i]
            expr = f"{a}.permute({', '.join(map(str, perm))})" if nd else f"{a}.permute(())"
            if self.boolean(0.3):
                expr = f"L.permute({a}, {tuple(perm)})"
        elif f == 5:
            expr = f"{a}.t()" if nd <= 2 else f"{a}.mT"
        elif f == 6:
            expr = f"{a}.unsqueeze({self.dim(nd, allow_extra=True)})"
            if self.boolean(0.3):
                expr = f"L.unsqueeze({a}, {self.dim(nd, allow_extra=True)})"
        elif f == 7:
            ones = [i for i, s in enumerate(shape) if s == 1]
            form = self.integer(0, 2)
            if form == 0 or not nd:
                expr = f"{a}.squeeze()"
            elif form == 1:
                expr = f"{a}.squeeze({self.choice(ones) if ones and self.boolean(0.7) else self.dim(nd)})"
            else:
                dims = sorted(set(self.dim(nd) for _ in range(2)))
                expr = f"{a}.squeeze({tuple(dims)})"
        elif f in (8, 9):
            new = [(self.choice([2, 3]) if s == 1 and self.boolean(0.6) else (-1 if self.boolean(0.3) else s))
                   for s in shape]
            if self.boolean(0.3) or not new:
                new = [self.choice([1, 2])] + new
            sizes = tuple(s if s != -1 else shape[i - (len(new) - nd)] for i, s in enumerate(new))
            expr = f"{a}.expand({', '.join(map(str, new))})" if self.boolean() else \
                f"L.broadcast_to({a}, {sizes})"
        elif f == 10:
            reps = [self.choice([1, 2]) for _ in range(nd + self.integer(0, 1))]
            if not reps:
                reps = [2]
            expr = f"{a}.repeat({', '.join(map(str, reps))})"
        elif f == 11:
            expr = f"{a}.contiguous()"
        else:
            others = [n for n in self.floats() if n != a
                      and broadcast_shape(tuple(self.t(n).shape), shape) == tuple(self.t(n).shape)]
            expr = f"{a}.expand_as({self.choice(others)})" if others else f"{a}.clone()"
        is_expand = f in (8, 9) or f == 12 and "expand_as" in expr
        name = self.fresh()
        self.run(f"{name} = {expr}", [name])
        self.mark_view(a, name)
        if is_expand:
            self.expanded.add(name)

    def view_allowed(self, t):
        """view() where torch's is a view, and now and then where it raises."""
        return t.is_contiguous() or self.boolean(0.2)

    # ---- indexing ------------------------------------------------------------------------

    def index(self, shape, advanced=True, unique=False):
        """An index expression for a tensor of ``shape`` (the text between the brackets):
        parts for some leading dims, maybe ``...`` and parts for some trailing dims."""
        nd = len(shape)
        if nd and self.boolean(0.3):
            front = self.integer(0, nd)
            back = self.integer(0, nd - front)
            segments = [list(range(front)), list(range(nd - back, nd))]
        else:
            used = self.integer(0, nd) if nd else 0
            if nd and self.boolean(0.6):
                used = max(used, 1)
            segments = [list(range(used))]
        state = {"adv": 0}
        texts = [self.index_parts(shape, dims, advanced, unique, state) for dims in segments]
        parts = texts[0] + (["..."] + texts[1] if len(segments) == 2 else [])
        if self.boolean(0.2):
            parts.insert(self.integer(0, len(parts)), "None")
        if not parts:
            parts = ["..."] if self.boolean() else [":"] if nd else ["None"]
        return ", ".join(parts)

    def index_parts(self, shape, dims, advanced, unique, state):
        parts = []
        i = 0
        while i < len(dims):
            n = shape[dims[i]]
            k = self.integer(0, 9)
            if k <= 2 and n > 0:
                parts.append(str(self.integer(-n, n - 1)))
            elif k == 7 and advanced and state["adv"] < 2 and n > 0:
                parts.append(self.int_array(n, unique))
                state["adv"] += 1
            elif k == 8 and advanced and state["adv"] == 0:
                m = self.integer(1, min(2, len(dims) - i))
                sizes = tuple(shape[d] for d in dims[i:i + m])
                seed = self.integer(0, 999)
                if m == 1 and self.boolean(0.5):
                    mask = np.random.default_rng(seed).random(sizes[0]) < 0.5
                    parts.append(repr([bool(v) for v in mask]))
                else:
                    parts.append(f"L.tensor(np.random.default_rng({seed}).random({sizes}) < 0.5)")
                state["adv"] = 2
                i += m
                continue
            elif k <= 6:
                parts.append(self.slice(n))
            else:
                parts.append(":")
            i += 1
        return parts

    def slice(self, n):
        lo = self.choice([None, 0, 1, -1, -2, 2, n, -n - 1])
        hi = self.choice([None, n, -1, 1, 2, n + 2, 0])
        step = self.choice([None, None, 1, 2, 3])
        text = ("" if lo is None else str(lo)) + ":" + ("" if hi is None else str(hi))
        if step is not None:
            text += f":{step}"
        return text

    def int_array(self, n, unique):
        k = self.integer(1, 4)
        if unique:
            vals = sorted({self.integer(-n, n - 1) % n for _ in range(k)})
            if self.boolean(0.5):
                vals = [v - n for v in vals]
        else:
            vals = [self.integer(-n, n - 1) for _ in range(k)]
        if self.boolean(0.5):
            return repr(vals)
        if self.boolean(0.2) and len(vals) >= 2 and len(vals) % 2 == 0:
            return f"L.tensor({np.array(vals).reshape(2, -1).tolist()})"
        return f"L.tensor({vals})"

    def op_index(self):
        a = self.pick()
        if a is None:
            return False
        t = self.t(a)
        shape = tuple(t.shape)
        f = self.integer(0, 9)
        name = self.fresh()
        if f == 8 and t.dim():
            d = self.dim(t.dim())
            n = shape[d]
            if n == 0:
                return False
            idx = [self.integer(0, n - 1) for _ in range(self.integer(1, 4))]
            self.run(f"{name} = L.index_select({a}, {d}, L.tensor({idx}))", [name])
            return
        if f == 9 and t.dim() and t.numel():
            d = self.dim(t.dim())
            ishape = [self.integer(1, s) if s else 0 for s in shape]
            ishape[d] = self.integer(1, 3)
            seed = self.integer(0, 999)
            idx = f"L.tensor(np.random.default_rng({seed}).integers(0, {shape[d]}, {tuple(ishape)}))"
            self.run(f"{name} = L.gather({a}, {d}, {idx})", [name])
            return
        if f == 7 and t.is_leaf and t.grad_fn is None and a not in self.detached:
            self.run(f"{name} = {a}[{a} > {self.choice([0, 0.5])}]", [name])
            return
        expr = f"{a}[{self.index(shape)}]"
        self.run(f"{name} = {expr}", [name])
        self.mark_view(a, name)

    def mark_view(self, src, name):
        if self.ns[name]._is_view():
            self.parent[name] = src
            if src in self.detached:
                self.detached.add(name)
            if self.storage(self.t(name)) in self.aliased:
                self.guard("alias_views_stale", self.t(name))

    # ---- what an in-place op may write (see KNOWN_BUGS) ----------------------------------

    def storage(self, t):
        return t.untyped_storage().data_ptr()

    def guard(self, flag, *tensors):
        """Keep in-place ops off the storage of ``tensors`` while ``flag`` is a known bug."""
        if flag in self.known:
            self.guarded.setdefault(flag, set()).update(self.storage(t) for t in tensors)

    def ancestors(self, name):
        chain = [name]
        while chain[-1] in self.parent:
            chain.append(self.parent[chain[-1]])
        return chain

    def probe(self, expr):
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                return eval(expr, self.ns)
        except Exception:  # noqa: BLE001
            return None

    def inplace_refused(self, a, target, operand, stmt=None, region=None):
        """Whether writing ``operand`` into ``target`` (``a`` or a view expression of it)
        would meet a KNOWN_BUGS entry."""
        t = self.t(a)
        b = self.probe(operand) if operand is not None else None
        b_rg = isinstance(b, self.torch.Tensor) and b.requires_grad
        chain = self.ancestors(a)
        mine = self.storage(t)
        if any(mine in storages for storages in self.guarded.values()):
            return True
        if "inplace_overlapping_operand" in self.known and isinstance(b, self.torch.Tensor):
            if self.storage(b) == mine and ".copy_(" not in (stmt or "") and operand != (region or target):
                return True
        written = self.probe(region or target)
        root = self.t(chain[-1])
        if "fill_on_expanded_raises_early" in self.known and written is not None \
                and self.torch._debug_has_internal_overlap(written) == 1 \
                and any(m in (stmt or "") for m in (".fill_(", ".zero_(")):
            return True
        if mine in self.grad_by_write and len(chain) > 1:
            return True
        if b_rg and not root.requires_grad:
            self.grad_by_write.add(mine)
        return False

    # ---- in-place ------------------------------------------------------------------------

    def writable(self, t):
        return not (t.is_leaf and t.requires_grad)

    def target(self):
        """An in-place target: a name, or a view expression of one."""
        ok = lambda t: self.writable(t)  # noqa: E731
        a = self.pick(ok)
        if a is None:
            return None, None
        t = self.t(a)
        nd = t.dim()
        f = self.integer(0, 7)
        if f <= 2 or not nd:
            return a, a
        if f <= 4:
            return a, f"{a}[{self.index(tuple(t.shape), advanced=False)}]"
        if f == 5:
            if self.view_allowed(t):
                return a, f"{a}.view(-1)"
            return a, a
        if f == 6:
            return a, f"{a}.transpose({self.dim(nd)}, {self.dim(nd)})"
        return a, f"{a}.unsqueeze(0)"

    def op_inplace(self):
        a, target = self.target()
        if a is None:
            return False
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                view_shape = tuple(eval(target, self.ns).shape)
        except Exception:  # noqa: BLE001
            return False
        f = self.integer(0, 13)
        tt = self.t(a)
        b = None
        if f <= 4:
            meth = ["add_", "sub_", "mul_", "div_", "add_"][f]
            b = self.operand(view_shape, into=view_shape)
            if meth == "div_":
                b = self.denominator(b)
            if meth == "mul_" and b in self.ns:
                b = self.bounded(b, 10)
            stmt = f"{target}.{meth}({b})"
        elif f == 5:
            stmt = f"{target}.clamp_({self.clamp_args()})"
            if any(self.near(tt, float(v)) for v in re.findall(r"=(-?[\d.]+)", stmt)):
                return False
        elif f == 6:
            m = self.choice(["tanh_", "sigmoid_", "relu_", "neg_", "abs_", "sin_", "exp_", "sqrt_"])
            if m == "exp_" and self.absmax(a) > 10:
                m = "tanh_"
            if m == "sqrt_" and not (self.positive(a) and self.absmin(a) >= 0.1):
                m = "abs_"
            if m in ("relu_", "abs_") and self.near(tt, 0.0):
                m = "neg_"
            stmt = f"{target}.{m}()"
        elif f == 7:
            stmt = f"{target}.zero_()" if self.boolean(0.3) else f"{target}.fill_({self.scalar()})"
        elif f == 8:
            b = self.operand(view_shape, into=view_shape)
            if b not in self.ns:
                b = f"L.tensor({float(eval(b))})"
            stmt = f"{target}.copy_({b})"
        elif f in (9, 10) and target == a:
            b = self.operand(view_shape, into=view_shape)
            op = self.choice(["+=", "-=", "*="])
            if op == "*=" and b in self.ns:
                b = self.bounded(b, 10)
            stmt = f"{a} {op} {b}"
        elif f == 11:
            stmt = f"{target}.mul_({self.scalar()})"
        else:
            stmt = f"{target}.pow_(2)" if self.absmax(a) < 100 else f"{target}.mul_(0.5)"
        if self.inplace_refused(a, target, b, stmt):
            return False
        if b in self.ns and self.t(b).dtype != tt.dtype:
            self.guard("converted_operand_write_not_versioned", self.t(b))
        self.run(stmt)

    def op_setitem(self):
        ok = lambda t: self.writable(t)  # noqa: E731
        a = self.pick(ok)
        if a is None:
            return False
        t = self.t(a)
        if not t.dim():
            return False
        idx = self.index(tuple(t.shape), unique=True)
        advanced = "[" in idx or "L.tensor" in idx
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                sub = tuple(eval(f"{a}[{idx}]", self.ns).shape)
        except Exception:  # noqa: BLE001
            return False
        if self.boolean(0.4):
            value = repr(self.scalar())
        else:
            value = self.operand(sub, into=sub)
        if self.boolean(0.15):
            value = self.operand(sub, into=sub)
            stmt = f"{a}[{idx}] += {value}"
        else:
            stmt = f"{a}[{idx}] = {value}"
        if self.inplace_refused(a, a, value, stmt, region=f"{a}[{idx}]"):
            return False
        self.run(stmt)

    def op_detach(self):
        a = self.pick()
        if a is None:
            return False
        name = self.fresh()
        form = self.integer(0, 2)
        if form in (0, 1):
            self.run(f"{name} = {a}.detach()" if form == 0 else f"{name} = {a}.detach().requires_grad_()",
                     [name])
            self.detached.add(name)
            mine = self.storage(self.t(a))
            self.aliased.add(mine)
            if any(self.storage(self.t(v)) == mine for v in self.parent):
                self.guard("alias_views_stale", self.t(a))
        else:
            self.run(f"{name} = {a}.detach().clone()", [name])

    def op_cast(self):
        a = self.pick()
        if a is None:
            return False
        name = self.fresh()
        expr = self.choice([f"{a}.double()", f"{a}.float()", f"{a}.to(L.float64)", f"{a}.to(L.float32)"])
        self.run(f"{name} = {expr}", [name])

    def op_catstack(self):
        a = self.pick()
        if a is None:
            return False
        t = self.t(a)
        shape = tuple(t.shape)
        nd = t.dim()
        name = self.fresh()
        if self.boolean(0.5) and nd:
            d = self.dim(nd)
            dd = d % nd
            same = lambda u: u.dim() == nd and all(  # noqa: E731
                i == dd or u.shape[i] == shape[i] for i in range(nd))
            parts = [a]
            for _ in range(self.integer(1, 3)):
                b = self.pick(same) if self.boolean(0.6) else None
                if b is None:
                    new = list(shape)
                    new[dd] = self.integer(1, 3)
                    b = self.leaf(tuple(new))
                parts.append(b)
            self.run(f"{name} = L.cat([{', '.join(parts)}], dim={d})", [name])
        else:
            d = self.dim(nd, allow_extra=True)
            parts = [a]
            for _ in range(self.integer(1, 3)):
                b = self.pick(lambda u: tuple(u.shape) == shape) if self.boolean(0.6) else None
                if b is None:
                    b = self.leaf(shape)
                parts.append(b)
            self.run(f"{name} = L.stack([{', '.join(parts)}], {d})", [name])

    def op_split(self):
        a = self.pick(lambda u: u.dim() > 0)
        if a is None:
            return False
        t = self.t(a)
        d = self.dim(t.dim())
        n = t.shape[d]
        f = self.integer(0, 3)
        if f == 0:
            expr = f"{a}.split({self.integer(1, 3)}, dim={d})"
        elif f == 1 and n:
            sizes = []
            left = n
            while left:
                s = self.integer(1, left)
                sizes.append(s)
                left -= s
            expr = f"L.split({a}, {sizes}, {d})"
        elif f == 2:
            expr = f"{a}.chunk({self.integer(1, 3)}, {d})"
        else:
            expr = f"{a}.unbind({d})"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                count = len(eval(expr, self.ns))
            except Exception:  # noqa: BLE001
                count = 1
        if count == 0:
            return False
        if count > 4:
            name = self.fresh()
            self.run(f"{name} = {expr}[{self.integer(-count, count - 1)}]", [name])
            self.mark_view(a, name)
            self.guard("split_output_inplace", t)
            return
        names = [self.fresh() for _ in range(count)]
        self.run(f"{', '.join(names)}{',' if count == 1 else ''} = {expr}", names)
        for n in names:
            self.mark_view(a, n)
        self.guard("split_output_inplace", t)

    def op_error(self):
        """A statement torch refuses (shape mismatch, bad dim, index out of range, in-place
        on a leaf that requires grad): tapejit must refuse it with the same exception type."""
        a = self.pick()
        if a is None:
            return False
        t = self.t(a)
        shape = tuple(t.shape)
        nd = t.dim()
        big = [i for i, s in enumerate(shape) if s > 1]
        f = self.integer(0, 7)
        name = self.fresh()
        if f == 0 and big:
            bad = list(shape)
            bad[self.choice(big)] += 1
            b = self.leaf(tuple(bad))
            self.run(f"{name} = {a} {self.choice(['+', '*', '-'])} {b}", [name])
        elif f == 1 and t.numel() > 1:
            self.run(f"{name} = {a}.reshape({t.numel() + 1})", [name])
        elif f == 2:
            self.run(f"{name} = {a}.sum({nd + 1})", [name])
        elif f == 3 and nd:
            self.run(f"{name} = {a}[{shape[0]}]", [name])
        elif f == 4:
            leaves = [n for n in self.floats() if self.t(n).is_leaf and self.t(n).requires_grad]
            if not leaves:
                return False
            self.run(f"{self.choice(leaves)}.{self.choice(['mul_(2)', 'add_(1)', 'exp_()', 'zero_()'])}")
        elif f == 5 and nd:
            self.run(f"{name} = {a}.transpose(0, {nd + 1})", [name])
        elif f == 6 and big:
            bad = list(shape)
            bad[self.choice(big)] += 1
            b = self.leaf(tuple(bad))
            d = self.choice([i for i in range(nd) if bad[i] == shape[i]] or [0])
            self.run(f"{name} = L.cat([{a}, {b}], dim={d})" if nd > 1 else f"{name} = L.stack([{a}, {b}])", [name])
        elif f == 7 and nd:
            self.run(f"{name} = {a}.max(dim={nd + 2})", [name])
        else:
            self.run(f"{name} = {a}.unsqueeze({nd + 2})", [name])


# ---- running a program in both libraries ------------------------------------------------

def execute(lines, lib):
    """Run the program in ``lib``; returns (namespace, index of the failing line or None,
    its exception or None)."""
    ns = {"L": lib, "np": np, "F": lib.nn.functional}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for i, line in enumerate(lines):
            try:
                exec(line, ns)
            except Exception as e:  # noqa: BLE001
                return ns, i, e
    return ns, None, None


def _builtin_base(cls):
    """The first built-in exception class ``cls`` derives from (torch raises subclasses)."""
    for c in cls.__mro__:
        if c.__module__ == "builtins":
            return c
    return Exception


def _describe(lines, i, e):
    if i is None:
        return "no error"
    import traceback
    where = traceback.extract_tb(e.__traceback__)[-1]
    return (f"{type(e).__name__} at line {i} ({lines[i]!r}): {str(e).splitlines()[0] if str(e) else ''}"
            f" [raised at {where.filename.rsplit('/', 2)[-2:]}:{where.lineno}]")


def _close(a, b, rtol, sums=1.0):
    """Positions where ``b`` differs from the reference ``a`` by more than ``rtol`` of the
    element or of the tensor's scale (its largest finite magnitude, at least 1), ``sums``
    times that for a small tensor (a sum's rounding grows with what it sums, not with
    its result)."""
    a = np.asarray(a, np.float64)
    b = np.asarray(b, np.float64)
    finite = np.isfinite(a)
    scale = max(1.0, float(np.abs(a[finite]).max()) if finite.any() else 1.0)
    if a.size <= 64:
        scale *= sums
    with np.errstate(invalid="ignore"):
        ok = (np.isnan(a) & np.isnan(b)) | (a == b) | (np.abs(a - b) <= rtol * (np.abs(a) + scale))
    return np.argwhere(~ok)


def _dtype_name(t):
    return str(t.dtype).rsplit(".", 1)[-1]


def compare_tensor(label, t, j, rtol, sums=1.0):
    """Problems between torch tensor ``t`` and tapejit tensor ``j`` (values only)."""
    if _dtype_name(t) != _dtype_name(j):
        return [f"{label}: dtype torch {_dtype_name(t)}, tapejit {_dtype_name(j)}"]
    if tuple(t.shape) != tuple(j.shape):
        return [f"{label}: shape torch {tuple(t.shape)}, tapejit {tuple(j.shape)}"]
    a = t.detach().numpy()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        b = np.asarray(j.detach().numpy())
    if not t.is_floating_point():
        if not np.array_equal(a, b):
            return [f"{label}: torch {a.tolist()}, tapejit {b.tolist()}"]
        return []
    bad = _close(a, b, rtol, sums)
    if len(bad):
        pos = tuple(bad[0])
        return [f"{label}: {len(bad)} of {a.size} elements differ, first at {pos}: "
                f"torch {a[pos]!r}, tapejit {b[pos]!r}"
                + (f"\n    torch   {np.array2string(a, precision=6)}"
                   f"\n    tapejit {np.array2string(b, precision=6)}"
                   if a.size <= 24 else "")]
    return []


def mismatches(lines, names, rtol, sums=1.0):
    """Run ``lines`` in torch and in tapejit; the differences, as readable lines (empty
    when tapejit matches torch): exceptions (line and type), then for every tensor the
    program named its dtype, shape, value, ``requires_grad``, ``is_leaf`` and, for a leaf,
    its gradient."""
    import tapejit
    import torch
    tns, ti, te = execute(lines, torch)
    jns, ji, je = execute(lines, tapejit)
    problems = []
    if ti != ji or (te is not None and not isinstance(je, _builtin_base(type(te)))):
        problems.append(f"exception: torch {_describe(lines, ti, te)}; tapejit {_describe(lines, ji, je)}")
        if ji is not None and (ti is None or ji < ti):
            return problems   # tapejit stopped first: nothing after it to compare
    last = min(x for x in (ti, ji, len(lines)) if x is not None)
    defined = set()
    for line in lines[:last]:
        m = re.match(r"\s*([\w, ]+?)\s*=[^=]", line)
        if m:
            defined.update(n.strip() for n in m.group(1).split(","))
    # A backward that raised may have left partial gradients in torch: compare none.
    grads = ti is None or "backward" not in lines[ti]
    for n in list(names) + ["loss"]:
        if n not in defined or not isinstance(tns.get(n), torch.Tensor):
            continue
        t, j = tns[n], jns.get(n)
        if not isinstance(j, tapejit.Tensor):
            problems.append(f"{n}: tapejit gave {type(j).__name__}")
            continue
        try:
            t_rg, t_leaf = t.requires_grad, t.is_leaf
        except RuntimeError:   # torch refuses to look at a view of a multi-output op modified in place
            continue
        problems += compare_tensor(n, t, j, rtol, sums)
        if t_rg != j.requires_grad:
            problems.append(f"{n}.requires_grad: torch {t_rg}, tapejit {j.requires_grad}")
        if t_leaf != j.is_leaf:
            problems.append(f"{n}.is_leaf: torch {t_leaf}, tapejit {j.is_leaf}")
        elif t_leaf and t_rg and grads:
            tg = t.grad
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                jg = j.grad
            if (tg is None) != (jg is None):
                problems.append(f"{n}.grad: torch {'None' if tg is None else 'a tensor'}, "
                                f"tapejit {'None' if jg is None else 'a tensor'}")
            elif tg is not None:
                problems += compare_tensor(n + ".grad", tg, jg, rtol, sums)
    return problems


def bound_names(lines):
    """Names the statements bind, in order."""
    names = []
    for line in lines:
        m = re.match(r"\s*([\w, ]+?)\s*=[^=]", line)
        if m:
            names += [n.strip() for n in m.group(1).split(",") if n.strip()]
    return names


def minimized(lines, rtol, sums=1.0):
    """``lines`` with every statement dropped that the first difference does not need
    (one at a time, until none can go), and that difference's problems."""
    def kind(problems):
        return re.sub(r"\d+", "#", problems[0].split(":")[0]) if problems else None

    def check(candidate):
        return mismatches(candidate, bound_names(candidate), rtol, sums)

    problems = check(lines)
    want = kind(problems)
    shrinking = want is not None
    while shrinking:
        shrinking = False
        for i in range(len(lines) - 1, -1, -1):
            candidate = lines[:i] + lines[i + 1:]
            found = check(candidate)
            if kind(found) == want:
                lines, problems, shrinking = candidate, found, True
    return lines, problems


def report(lines, problems):
    """A failure message: the differences, then the program for torch and for tapejit."""
    return ("tapejit differs from torch:\n  " + "\n  ".join(problems)
            + "\n\n# ---- torch ----\n" + source(lines, "torch")
            + "\n\n# ---- tapejit ----\n" + source(lines, "tapejit") + "\n")


def tolerance(lines):
    """rtol for a program: float64 throughout, or float32 anywhere (a cast included)."""
    return 1e-4 if any("float32" in line or ".float()" in line for line in lines) else 1e-10


def sum_tolerance(builder):
    """How much more a small result (a sum, a broadcast operand's gradient) may differ
    than an elementwise one: the two libraries sum in different orders, and the rounding
    grows about as the square root of the number of terms (1 for small programs)."""
    if not builder.big:
        return 1.0
    largest = max((builder.ns[n].numel() for n in builder.names), default=1)
    return max(1.0, math.sqrt(largest) / 4)
