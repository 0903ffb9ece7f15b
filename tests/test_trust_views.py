"""Views, indexing and in-place ops against torch (issue 14): each case was a mismatch the
fuzz suite (tests/fuzz_programs.py, KNOWN_BUGS) found.  ``same(code)`` runs one program
in torch and in tapejit and compares what it binds to ``out`` (values, dtype, shape,
``requires_grad``, or the exception type)."""
import random

import numpy as np
import pytest

import tapejit as tj

torch = pytest.importorskip("torch")


def _run(lib, code):
    ns = {"L": lib, "np": np}
    try:
        exec(code, ns)
    except Exception as e:   # noqa: BLE001  (the exception type is the result)
        return type(e)
    return ns["out"]


def _plain(v):
    if isinstance(v, (torch.Tensor, tj.Tensor)):
        return ("tensor", str(v.dtype).split(".")[-1], tuple(v.shape), v.requires_grad,
                np.asarray(v.detach().numpy(), dtype=np.float64).tolist())
    if isinstance(v, (tuple, list)):
        return tuple(_plain(x) for x in v)
    return v


def same(code):
    want, got = _run(torch, code), _run(tj, code)
    if isinstance(want, type):
        assert isinstance(got, type) and issubclass(got, want), f"{code}\ntorch: {want}\ntapejit: {got}"
        return
    assert not isinstance(got, type), f"{code}\ntorch: {want}\ntapejit: {got}"
    assert repr(_plain(got)) == repr(_plain(want)), f"{code}\ntorch: {_plain(want)}\ntapejit: {_plain(got)}"


# ---- views of tensors with no history that are not contiguous ----------------------------

@pytest.mark.parametrize("code", [
    # broadcasting a column slice (expand inside the binary op)
    "x = L.tensor(np.arange(12.).reshape(3, 4)); w = L.tensor([[.5, 1., 2., 3.]], requires_grad=True)\n"
    "out = (w + x[:, 1:2]).detach()",
    "x = L.tensor(np.arange(6.).reshape(3, 2)); out = x[:, 1:].expand(3, 2)",
    "x = L.tensor(np.arange(24.).reshape(2, 3, 4))[:, 1:, ::2]; out = (x.permute(2, 0, 1), x.t() if x.dim() == 2 else x.transpose(0, 2), x.repeat(2, 1, 1))",
    "x = L.tensor(np.arange(12.).reshape(3, 4))[:, 2:3]; y = L.tensor([1., 2.], requires_grad=True)\n"
    "out = (L.maximum(x, y).detach(), L.where(x > 5, x, y).detach(), (x ** y).detach())",
    # writes through a view of a view land in the base's own elements
    "x = L.tensor(np.arange(20.).reshape(4, 5)); x[:, 4:5].t()[0, 1] = 100.; out = x",
    "x = L.tensor(np.arange(20.).reshape(4, 5)); x[1:, ::2].t()[2].mul_(-1); out = x",
])
def test_strided_views_of_noncontiguous_plain_tensors(code):
    same(code)


def test_expand_of_a_plain_tensor_is_a_view():
    # torch: the expanded tensor sees later in-place changes of its source
    same("x = L.tensor([1.]); y = x.expand(2, 1); x.mul_(2); out = y")
    same("x = L.tensor([[1., 2.]]); y = L.broadcast_to(x, (3, 2)); x[0, 1] = 7.; out = y")


@pytest.mark.parametrize("stmt", ["e.add_(1)", "e.fill_(3.)", "e.zero_()", "e.copy_(L.ones(3, 2))",
                                  "e[0] = 5.", "e[:, 0] = 5.", "e[0] += 1", "e.mul_(2)",
                                  "e[[0]] = 7.", "e[0, 0] = 9."])
def test_writes_into_an_expanded_plain_tensor(stmt):
    # torch refuses in-place ops whose written elements overlap (add_, e[:, 0] = ...) and
    # writes the shared element once otherwise (fill_, e[0] = ..., index_put_)
    same(f"x = L.tensor([1., 2.]); e = x.expand(3, 2); {stmt}; out = x")


def test_repeat_copies():
    same("x = L.tensor([[1., 2.]]); y = x.repeat(1, 1); x.mul_(2); out = y")
    same("a = L.tensor([[1., 2.]], requires_grad=True); y = (a * 1).repeat(2, 1); y[0] = 5\n"
         "out = y.detach()")
    same("a = L.tensor([[1., 2.]], requires_grad=True); b = a * 1; y = b.repeat(1, 1); y.mul_(3)\n"
         "out = (b.detach(), y.detach())")


# ---- indexing: torch's rule for advanced indices ------------------------------------------

@pytest.mark.parametrize("code", [
    "x = L.tensor(np.arange(18.).reshape(2, 3, 3, 1, 1)); m = L.tensor([[True], [False], [True]])\n"
    "out = x[..., 1, m, :]",
    "x = L.tensor(np.arange(18.).reshape(2, 3, 3, 1, 1), requires_grad=True); m = L.tensor([[True], [False], [True]])\n"
    "out = x[..., 1, m, :].detach()",
    "x = L.tensor(np.arange(12.).reshape(2, 3, 2)); m = L.tensor([[True, False, True], [False, True, True]])\n"
    "out = x[m, 0]",
    "x = L.tensor(np.arange(6.).reshape(3, 2, 1)); out = x[0:5, L.tensor([0, 1]), ..., L.tensor([-1])]",
    "x = L.tensor(np.arange(24.).reshape(2, 3, 4)); out = (x[0, :, [0, 1]], x[[0, 1], :, 0], x[:, None, [1, 2], 1])",
    "x = L.zeros(3); out = x[[]]",
    "x = L.zeros(3); x[[]] = 2; out = x",
    "x = L.zeros(3, 3, 2); x[0:2, 2, ..., [True, False]] += 1; out = x",
    "x = L.zeros(3, 3, 2, requires_grad=True); y = x * 1; y[0:2, 2, ..., [True, False]] += 1; out = y.detach()",
    # an index out of range where nothing is selected: torch checks nothing
    "x = L.zeros(3, 2, 1); out = x[..., L.tensor([2, 1]), 1:]",
])
def test_advanced_indexing_follows_torch(code):
    same(code)


@pytest.mark.parametrize("code", [
    "x = L.zeros(4, dtype=L.float64); x[[1, 3]] = L.tensor([1., 2.], dtype=L.float32); out = x",
    "x = L.zeros(4, dtype=L.float64); x[[1, 3]] = L.tensor([1., 2.], requires_grad=True); out = x",
    "x = L.zeros(4, dtype=L.float64); x[L.tensor([True, False, True, False])] = L.tensor(1.); out = x",
    "x = L.zeros(4, dtype=L.float64); x[1:3] = L.tensor([1., 2.]); out = x",
    "x = L.zeros(3); x[0:1] = L.tensor([1., 2.]); out = x",
    "x = L.zeros(3); x[[0]] = L.tensor([1., 2.]); out = x",
    "x = L.zeros(3, requires_grad=True) * 1; x[0:1] = L.tensor([1., 2.]); out = x",
    "x = L.zeros(3); x[0:1] = L.tensor([[5.]]); x[[0, 1]] = L.tensor([[[5., 6.]]]); out = x",
])
def test_setitem_dtypes_and_shapes_follow_torch(code):
    # index_put_ wants one dtype (a mask with a 0-d value is torch's masked_fill_); a value
    # that does not broadcast is torch's RuntimeError, not NumPy's ValueError
    same(code)


def _random_key(rng, shape):
    key, dims, ellipsis = [], 0, False
    for _ in range(rng.randint(1, 5)):
        c, left = rng.random(), len(shape) - dims
        if c < 0.15 and not ellipsis:
            key.append(Ellipsis)
            ellipsis = True
        elif c < 0.25:
            key.append(None)
        elif left <= 0:
            break
        elif c < 0.45:
            n = max(shape[dims], 1)
            key.append(rng.randint(-n, n - 1))
            dims += 1
        elif c < 0.6:
            key.append(slice(rng.choice([None, 0, 1]), rng.choice([None, 2, 5])))
            dims += 1
        elif c < 0.8:
            n = max(shape[dims], 1)
            key.append(np.array([rng.randint(0, n - 1) for _ in range(rng.randint(0, 2))], dtype=np.int64))
            dims += 1
        else:
            k = rng.randint(1, min(2, left))
            size = int(np.prod(shape[dims:dims + k]))
            key.append(np.array([rng.random() < 0.6 for _ in range(size)], dtype=bool).reshape(shape[dims:dims + k]))
            dims += k
    return tuple(key)


def test_index_positions_match_torch_on_random_keys():
    """Ints, slices, None, ``...``, integer arrays and masks over one to two dims, mixed:
    tapejit's positions (tapejit/ops/indexing.py ``_torch_index``) are torch's, and a key
    torch refuses raises IndexError."""
    from tapejit.ops.indexing import _torch_index
    rng = random.Random(14)
    for _ in range(3000):
        shape = tuple(rng.randint(0, 3) for _ in range(rng.randint(1, 4)))
        key = _random_key(rng, shape)
        grid = np.arange(int(np.prod(shape))).reshape(shape)
        try:
            want = torch.from_numpy(grid)[tuple(torch.from_numpy(k) if isinstance(k, np.ndarray) else k
                                                for k in key)].numpy()
        except IndexError:
            with pytest.raises(IndexError):
                _torch_index(grid, key)
            continue
        got = np.asarray(_torch_index(grid, key))
        assert got.shape == want.shape and (got == want).all(), (shape, key)


# ---- contiguity, view() and the copies torch's reshape makes ------------------------------

@pytest.mark.parametrize("history", [False, True])
def test_contiguity_view_and_reshape_copies_follow_torch(history):
    """Random chains of views of a tensor with no history or of a recorded one: torch's
    ``is_contiguous()``, whether ``view(-1)`` raises, and whether an in-place op on
    ``reshape(-1)`` / ``contiguous()`` / ``flatten()`` reaches the base."""
    rng = random.Random(7 + history)
    ops = ["v.transpose(0, -1)", "v.permute(*reversed(range(v.dim())))", "v[:, 1:]", "v[::2]",
           "v[..., ::2]", "v[1]", "v[:, 0]", "v.unsqueeze(1)", "v.squeeze()", "v.expand(2, *v.shape)",
           "v.t() if v.dim() == 2 else v", "v.reshape(-1)", "v[:, None]"]
    for _ in range(150):
        chain = [rng.choice(ops) for _ in range(rng.randint(1, 3))]
        shape = tuple(rng.randint(1, 3) for _ in range(rng.randint(2, 3)))
        head = (f"a = L.tensor(np.arange({int(np.prod(shape))}.).reshape({shape}), requires_grad={history})\n"
                f"b = a * 1 if {history} else a\nv = b\n")
        body = "".join(f"v = {op}\n" for op in chain)
        for tail in ["out = v.is_contiguous()",
                     "out = v.view(-1)",
                     "r = v.reshape(-1); r.mul_(2); out = b.detach()",
                     "r = v.contiguous(); r.add_(1); out = b.detach()",
                     "r = v.flatten(); r.sub_(1); out = b.detach()"]:
            same(head + body + tail)


@pytest.mark.parametrize("expr", ["x.permute(0)", "x.t()", "x.T", "x.view(2)", "x.expand(2)",
                                  "x.expand_as(x)", "x.squeeze()", "x.reshape(2)", "x.transpose(0, 0)",
                                  "x.unflatten(0, (2,))"])
def test_identity_views_of_a_leaf_are_new_views(expr):
    # torch: a new non-leaf view of the leaf; in-place ops on it are refused
    same(f"x = L.tensor([1., 2.], requires_grad=True); y = {expr}; out = (y is x, y.is_leaf, y.grad_fn is None)")
    same(f"x = L.tensor([1., 2.], requires_grad=True); y = {expr}; y.mul_(2); out = y")
    same(f"x = L.tensor([1., 2.]); y = {expr}; y.mul_(2); out = (y is x, x)")


def test_flatten_of_one_dim_and_contiguous_of_contiguous_return_the_tensor():
    same("x = L.tensor([1., 2.], requires_grad=True); out = (x.flatten() is x, x.contiguous() is x)")


# ---- one storage: views see in-place changes, writes reach the root ----------------------

@pytest.mark.parametrize("code", [
    # a view read after its base changed in place holds the new values (README's old
    # difference from torch)
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; v = y[0:2]; y.mul_(0.5)\n"
    "out = (v.detach(), v.requires_grad)",
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; v = y[0:2]; w = y[1:]; v.mul_(10)\n"
    "(w * L.tensor([1., 2.])).sum().backward(); out = (w.detach(), y.detach(), x.grad)",
    "x = L.tensor([[1., 2.], [3., 4.]], requires_grad=True); y = x * 1; t = y.t(); r = t[0]; y.add_(1)\n"
    "out = (t.detach(), r.detach())",
    # ... and records that saved the view's old value refuse backward, as torch's
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; v = y[0:2]; z = (v * v).sum()\n"
    "y.mul_(2); z.backward(); out = x.grad",
    # an in-place op through a view of a tensor with no history, with an operand that
    # requires grad: the base takes the value and the history
    "x = L.tensor([1., 2.]); w = L.tensor([.5], requires_grad=True); x[:1].add_(w)\n"
    "out = (x.detach(), x.requires_grad, x.is_leaf)",
    "x = L.tensor([1., 2.]); w = L.tensor([.5], requires_grad=True); v = x[1:]; x[:1].add_(w); x.sum().backward()\n"
    "out = (x.detach(), w.grad, v.detach())",
    # a write through a NumPy view of a tensor a record saved is seen at backward
    "x = L.tensor([1., 2.]); w = L.tensor([1., 2.], requires_grad=True); y = x / w; x[:].pow_(2)\n"
    "y.sum().backward(); out = w.grad",
    # an op that raises leaves the view as it was
    "x = L.tensor([.5, 1.], requires_grad=True); v = x[None][0]\n"
    "try:\n    v.mul_(2)\nexcept RuntimeError:\n    pass\nout = v.detach()",
    "v = (L.tensor([[.5]], requires_grad=True) * 1).expand(2, 5, 3)[:, -2]\n"
    "try:\n    v.pow_(2)\nexcept RuntimeError:\n    pass\nout = v.detach()",
    # an in-place op on an empty part of a saved tensor still counts as a change of it
    "x = L.tensor([[1., 2.], [3., 4.]], requires_grad=True); y = x.rsqrt()\n"
    "y[None, ..., 1:1].transpose(1, 2).abs_(); y.sum().backward(); out = x.grad",
    # rows of a tensor with no history are 0-d tensors that in-place ops can write
    "a, b = L.tensor([1., 2.]).unbind(0); a.add_(.5); c = b.clone(); c.add_(.5); out = (a, c)",
    "x = L.tensor([1., 2.]); a, b = x.unbind(0); b.mul_(3); out = x",
])
def test_views_share_storage_as_in_torch(code):
    same(code)


# ---- in-place ops: what torch writes, keeps in the graph and refuses ----------------------

@pytest.mark.parametrize("code", [
    # setitem on a view writes the view's part of the storage (copy_ of the indexed part),
    # refused only where that part overlaps itself
    "a = L.tensor([1., 2., 3.], requires_grad=True); y = a * 1; e = y.expand(2, 3); e[:1] = L.tensor([5., 6., 7.])\n"
    "out = (y.detach(), e.detach())",
    "a = L.tensor([[1., 2., 3., 4.]], requires_grad=True); y = a * 1; e = y.expand(2, 4); e[0, 3] += 0.5\n"
    "y.sum().backward(); out = (y.detach(), e.detach(), a.grad)",
    "a = L.tensor([[1., 2., 3., 4.]], requires_grad=True); y = a * 1; e = y.expand(2, 4); e[:, 3] += 0.5; out = y",
    "a = L.tensor([[1., 2.], [3., 4.]], requires_grad=True); y = a * 1; t = y.t(); t[[0, 1], 0] = L.tensor([9., 8.])\n"
    "out = (y.detach(), t.detach())",
    # copy_ from a tensor that requires grad makes the target require it
    "x = L.tensor([1.]); w = L.tensor([2.], requires_grad=True); x.copy_(w); x.sum().backward()\n"
    "out = (x.detach(), x.requires_grad, x.is_leaf, w.grad)",
    "x = L.zeros(2, 2); w = L.tensor([2., 3.], requires_grad=True); x[0] = w; x.sum().backward()\n"
    "out = (x.detach(), x.requires_grad, w.grad)",
    # copy_/fill_/zero_ replace the value exactly: NaN or inf in it, or an infinite
    # gradient, give no NaN (torch's gradient to the old value is an exact zero)
    "y = L.zeros(0, requires_grad=True).mean(); y.copy_(L.tensor(0.5)); out = (y.detach(), y.requires_grad)",
    "x = L.tensor([1., 2.], requires_grad=True); y = x * 1; y.fill_(3.); (y * float('inf')).sum().backward()\n"
    "out = (y.detach(), x.grad)",
    "x = L.tensor([1., float('inf')], requires_grad=True); y = x * 1; y.zero_(); z = y.clone(); z.copy_(x * 2)\n"
    "(z * float('inf')).sum().backward(); out = (y.detach(), z.detach(), x.grad)",
    # overlapping copy_ is refused; y.mul_(y) saved the y it changes
    "x = L.tensor([1., 2., 3.]); x[1:].copy_(x[:2]); out = x",
    "x = L.tensor([1., 2., 3.]); x.copy_(x); x[:2].copy_(x[:2]); out = x",
    "x = L.tensor([1., 2.]); x.copy_(x[None]); out = x",
    # ... unless one of them is not dense (torch does not check then)
    "x = L.tensor([0., 1., 2., 3., 4., 5.]); x[::2].copy_(x[:3]); out = x",
    "x = L.tensor([0., 1., 2., 3., 4., 5.]); x[:3].copy_(x[::2]); out = x",
    "a = L.tensor([1., 2.], requires_grad=True); y = a * 1; y.mul_(y); y.sum().backward(); out = a.grad",
    "a = L.tensor([1., 2.], requires_grad=True); y = a * 1; y.add_(y); y.sum().backward(); out = a.grad",
    # in-place ops on outputs of split/chunk/unbind that require grad are refused
    "a = L.tensor([1., 2., 3., 4.], requires_grad=True); y = a * 1; p, q = y.split(2); p.mul_(2); out = y",
    "a = L.tensor([[1., 2.], [3., 4.]], requires_grad=True); y = a * 1; p, q = y.unbind(1); p[0:1].mul_(2); out = y",
    "a = L.tensor([1., 2., 3., 4.], requires_grad=True); y = a * 1\n"
    "with L.no_grad():\n    p, q = y.chunk(2); p.mul_(2)\nout = y.detach()",
])
def test_inplace_writes_follow_torch(code):
    same(code)


@pytest.mark.parametrize("code", [
    # torch saves an operand of mul/div only for the other operand's gradient, c / x saves
    # an intermediate: changing them in place later is fine
    "a = L.tensor([1., 2.], requires_grad=True); b = a * 1; y = b * L.tensor([3., 4.]); b.mul_(2)\n"
    "y.sum().backward(); out = a.grad",
    "a = L.tensor([1., 2.], requires_grad=True); b = a * 1; y = b / L.tensor([3., 4.]); b.mul_(2)\n"
    "y.sum().backward(); out = a.grad",
    "a = L.tensor([1., 2.], requires_grad=True); b = a * 1; y = L.tensor([3., 4.]) / b; b.mul_(2)\n"
    "y.sum().backward(); out = a.grad",
    "x0 = L.tensor([1., 2.], requires_grad=True); x = x0 * 1; y = 2.0 / x; x.mul_(1.0); y.sum().backward()\n"
    "out = x0.grad",
    # ... but pow keeps its result, gather its input (torch raises at backward)
    "a = L.tensor([1., 2.], requires_grad=True); b = L.tensor([2., 3.], requires_grad=True)\n"
    "v = (a * 1) ** b; v.mul_(2); v.sum().backward(); out = b.grad",
    "b = L.tensor([2., 3.], requires_grad=True); v = 2.0 ** b; v.mul_(2); v.sum().backward(); out = b.grad",
    "a = L.tensor([[1., 2.], [3., 4.]], requires_grad=True); y = a * 1; g = y.gather(1, L.tensor([[0], [1]]))\n"
    "y.mul_(2); g.sum().backward(); out = a.grad",
    # var keeps its input only, std its result too
    "a = L.tensor([1., 2., 3.], requires_grad=True); v = (a * 1).var(); v.mul_(2); v.backward(); out = a.grad",
    "a = L.tensor([1., 2., 3.], requires_grad=True); v = (a * 1).std(); v.mul_(2); v.backward(); out = a.grad",
])
def test_saved_values_follow_torch(code):
    same(code)


@pytest.mark.parametrize("code", [
    "t = L.tensor([1., 2.]); out = (L.div(2, t), L.add(2, t), L.sub(2, t), L.mul(2.5, t), L.true_divide(1, t))",
    "t = L.tensor([1., 2.], requires_grad=True); y = L.div(2, t); y.sum().backward(); out = (y.detach(), t.grad)",
    "out = (L.zeros(0).chunk(1, 0), L.zeros(0).chunk(3), L.zeros(0).split(2, 0), L.zeros(2, 0).chunk(2, 1))",
    "out = L.zeros(0).argmax()",
    "out = L.zeros(0, 3).argmin(0)",
    "out = L.zeros(0, 3).argmax(1)",
    "x = L.tensor([1.]); out = x.squeeze((-1, 0))",
    "out = L.cat([L.zeros(0, requires_grad=True) * 1, L.tensor([1., 2.])]).requires_grad",
    "e = L.zeros(0, requires_grad=True); y = L.cat([e, L.tensor([1., 2.])]); y.sum().backward(); out = (y, e.grad)",
    "out = L.index_select(L.zeros(0, 0), 1, L.tensor([0]))",
])
def test_empty_and_number_arguments_follow_torch(code):
    same(code)


def test_broadcast_gradient_sums_accurately():
    """A broadcast operand's gradient sums 126,000 float32 terms: torch's (pairwise) sum is
    within 1e-8 of the exact one; a float32 running sum drifted by 3e-5."""
    b = (np.random.RandomState(0).rand(126000, 1) * 1e-4 + 3.2e-5).astype(np.float32)
    exact = b.astype(np.float64).sum()
    for shape in [(1, 1), (), (1,)]:
        w = tj.ones(shape, requires_grad=True)
        (w * tj.tensor(b)).sum().backward()
        assert abs(float(w.grad.double().sum()) - exact) <= 2e-6, shape
    b = np.random.RandomState(1).rand(126000, 3).astype(np.float32)
    w = tj.ones(3, requires_grad=True)    # through expand's backward
    (w * tj.tensor(b)).sum().backward()
    np.testing.assert_allclose(w.grad.numpy(), b.astype(np.float64).sum(0), rtol=1e-7)


@pytest.mark.parametrize("code", [
    # a record saved a view of the value changed in place (an expand for broadcasting, the
    # permuted copy of a reduction over dims apart, a slice): torch's view shares the
    # version counter, so backward is refused
    "a = L.tensor([[1., 2.]], requires_grad=True); w = L.tensor([[1., 2.], [3., 4.]], requires_grad=True)\n"
    "b = a * 1; y = b * w; b.mul_(2); y.sum().backward(); out = w.grad",
    "x = L.tensor(np.arange(8.).reshape(2, 2, 2), requires_grad=True); y = x / 2; m = y.amax(dim=(0, 2))\n"
    "y.add_(1); m.sum().backward(); out = x.grad",
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; z = (y[1:] * y[1:]).sum(); y[0:1].mul_(2)\n"
    "z.backward(); out = x.grad",
    # an in-place op through a view saved its result (exp_), then the base changed
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; y[0:2].exp_(); y.mul_(2); y.sum().backward()\n"
    "out = x.grad",
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; y[0:2].exp_(); y.sum().backward(); out = x.grad",
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; y[0:2].exp_(); y[2:].mul_(3); y.sum().backward()\n"
    "out = x.grad",
    # ... but what the in-place op itself saved (clamp_'s input, through a view of a view) is
    # not refused when the other views take their elements again
    "x = L.tensor([[0.5]], requires_grad=True); y = x + 2; v = y[:]; v.view(-1).clamp_(min=-1.0, max=0.0)\n"
    "(v * 0.5).sum().backward(); out = x.grad",
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; v = y[0:2]; w = v.view(2, 1); w.exp_(); w.mul_(2)\n"
    "(y * 1).sum().backward(); out = x.grad",
    # ... but a copy made from the value (clone, an advanced index) is not a view
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; c = y.clone(); z = (c * c).sum(); y.mul_(2)\n"
    "z.backward(); out = x.grad",
    "x = L.tensor([1., 2., 3.], requires_grad=True); y = x * 1; c = y[[0, 2]]; z = (c * c).sum(); y.mul_(2)\n"
    "z.backward(); out = x.grad",
])
def test_changes_of_saved_views_are_detected(code):
    same(code)


# ---- found by the seeded fuzz programs ----------------------------------------------------

@pytest.mark.parametrize("code", [
    # max/min along a dim, sort and topk save only their indices (torch): writing their
    # input in place afterwards leaves their gradient valid
    "x = L.tensor([.5, -1., 2., .25, 1.], requires_grad=True); y = x / 2; v, i = L.max(y, dim=0)\n"
    "y[L.tensor([-5, -1])] = v; (v.clamp_min(-.5) * 3).sum().backward(); out = (x.grad, y.detach())",
    "x = L.tensor([[.5, -1.], [2., .25]], requires_grad=True); y = x * 1; s = y.sort(1)[0]; m = y.min(0).values\n"
    "t = y.topk(1, 1).values; y.mul_(2); (s.sum() + 2 * m.sum() + 3 * t.sum()).backward(); out = x.grad",
    # a bool mask and a one-element value of another dtype: masked_fill (torch), not index_put
    "x = L.zeros(2, 3, dtype=L.float64); v = L.tensor([1.5], requires_grad=True)\n"
    "x[L.tensor([[True, False, True], [False, False, True]])] = v; x.sum().backward(); out = (x.detach(), v.grad)",
    "x = L.zeros(4, dtype=L.float64); x[L.tensor([True, False, True, False])] = L.ones(2); out = x",
    "x = L.zeros(4, dtype=L.float64); x[L.tensor([0, 2])] = L.ones(1); out = x",
])
def test_selections_save_indices_and_masked_fill_converts(code):
    same(code)
