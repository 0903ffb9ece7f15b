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
    tapejit's positions (tapejit/ops/movement.py ``_torch_index``) are torch's, and a key
    torch refuses raises IndexError."""
    from tapejit.ops.movement import _torch_index
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

