"""int8, int16, int32, uint8 (no gradients) and float16/bfloat16 (stored narrow, computed in
float32 with each result rounded), against torch."""
import io
import warnings

import numpy as np
import pytest

import tapejit as tj

SMALL = ["int8", "int16", "int32", "uint8", "float16", "bfloat16"]
ALL = ["float64", "float32", "float16", "bfloat16", "int64", "int32", "int16", "int8", "uint8", "bool"]


def _pair(lib, name, values):
    return lib.tensor(values, dtype=getattr(lib, name))


def _same(mine, theirs):
    """Same dtype (by name) and the same values, exactly."""
    torch = pytest.importorskip("torch")
    assert str(mine.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
    expected = theirs.float() if theirs.dtype in (torch.float16, torch.bfloat16) else theirs
    got = mine.float() if mine.dtype in (tj.float16, tj.bfloat16) else mine
    np.testing.assert_array_equal(got.numpy(), expected.numpy())


def test_names_aliases_and_legacy_types_are_torchs():
    torch = pytest.importorskip("torch")
    assert tj.int is tj.int32 and tj.short is tj.int16 and tj.half is tj.float16 and tj.long is tj.int64
    for name in SMALL:
        mine, theirs = tj.zeros(1, dtype=getattr(tj, name)), torch.zeros(1, dtype=getattr(torch, name))
        assert mine.type() == theirs.type() and mine.element_size() == theirs.element_size()
        assert mine.is_floating_point() == theirs.is_floating_point()
        assert isinstance(mine, getattr(tj, theirs.type().split(".")[1]))      # tj.CharTensor ...
    x = tj.tensor([1.7, -2.2])
    for method in ("int", "short", "char", "byte", "half", "bfloat16", "long", "float", "double"):
        _same(getattr(x.abs(), method)(), getattr(torch.tensor([1.7, -2.2]).abs(), method)())
    assert x.type("torch.ShortTensor").dtype is tj.int16 and x.type(tj.HalfTensor).dtype is tj.float16


def test_creation_keeps_the_dtype():
    torch = pytest.importorskip("torch")
    for name in SMALL:
        d, td = getattr(tj, name), getattr(torch, name)
        for make in (lambda L, dt: L.zeros(2, 3, dtype=dt), lambda L, dt: L.ones(2, dtype=dt),
                     lambda L, dt: L.full((2,), 7, dtype=dt), lambda L, dt: L.arange(5, dtype=dt),
                     lambda L, dt: L.tensor([[1, 2], [3, 4]], dtype=dt), lambda L, dt: L.empty(3, dtype=dt).zero_(),
                     lambda L, dt: L.zeros_like(L.ones(2), dtype=dt)):
            _same(make(tj, d), make(torch, td))
        if not d.is_floating_point:
            assert tj.randint(0, 5, (4,), dtype=d).dtype is d
    with pytest.raises(RuntimeError, match="value cannot be converted to type int8 without overflow"):
        tj.tensor([1, 200], dtype=tj.int8)    # torch's error
    with pytest.raises(RuntimeError, match="value cannot be converted to type uint8_t without overflow"):
        tj.full((1,), 300, dtype=tj.uint8)


def test_numpy_arrays_keep_their_dtype_and_share_memory():
    for np_dtype, dt in ((np.int8, tj.int8), (np.int16, tj.int16), (np.int32, tj.int32), (np.uint8, tj.uint8),
                         (np.float16, tj.float16)):
        a = np.array([1, 2, 3], np_dtype)
        t = tj.from_numpy(a)
        a[0] = 9
        assert t.dtype is dt and t.tolist() == [9, 2, 3] and t.numpy().dtype == np_dtype
        assert tj.tensor(a).dtype is dt and tj.as_tensor(a).dtype is dt
    with pytest.raises(TypeError, match="Got unsupported ScalarType BFloat16"):   # torch's: NumPy has none
        tj.ones(2, dtype=tj.bfloat16).numpy()


def test_promotion_over_every_dtype_pair_is_torchs():
    torch = pytest.importorskip("torch")
    values = {"bool": [True, False]}
    for a in ALL:
        for b in ALL:
            assert tj.promote_types(getattr(tj, a), getattr(tj, b)).name == \
                str(torch.promote_types(getattr(torch, a), getattr(torch, b))).split(".")[1]
            x = [tj.tensor(values.get(a, [3, 5]), dtype=getattr(tj, a)),
                 torch.tensor(values.get(a, [3, 5]), dtype=getattr(torch, a))]
            y = [tj.tensor(values.get(b, [2, 7]), dtype=getattr(tj, b)),
                 torch.tensor(values.get(b, [2, 7]), dtype=getattr(torch, b))]
            _same(x[0] * y[0], x[1] * y[1])
            _same(x[0] / y[0], x[1] / y[1])
            if "bool" not in (a, b):     # torch refuses bool - bool; add is the same table
                _same(x[0] + y[0], x[1] + y[1])
            _same(x[0] + y[0][0], x[1] + y[1][0])    # a 0-d tensor promotes only across categories


def test_python_scalars_keep_the_tensors_dtype_and_integers_wrap_around():
    torch = pytest.importorskip("torch")
    for expr in (lambda L: _pair(L, "int8", [1, 127]) + 1, lambda L: _pair(L, "int8", [1, 127]) + 300,
                 lambda L: _pair(L, "uint8", [1, 2]) - 3, lambda L: 3 - _pair(L, "uint8", [5]),
                 lambda L: _pair(L, "uint8", [200]) + _pair(L, "uint8", [100]),
                 lambda L: _pair(L, "int16", [300]) * _pair(L, "int16", [300]), lambda L: -_pair(L, "int8", [-128]),
                 lambda L: _pair(L, "int8", [1]) + L.tensor(1000), lambda L: _pair(L, "int32", [7]) * 1.5,
                 lambda L: _pair(L, "int16", [7]) // 2, lambda L: _pair(L, "uint8", [7]) % 3,
                 lambda L: _pair(L, "int8", [-129 + 256]).to(L.uint8), lambda L: L.tensor([-129, 300]).to(L.int8),
                 lambda L: _pair(L, "int8", [5, 3]) & _pair(L, "int32", [1, 1]),
                 lambda L: _pair(L, "int8", [-1]) < _pair(L, "uint8", [255])):
        _same(expr(tj), expr(torch))


def test_reductions_give_torchs_dtypes():
    torch = pytest.importorskip("torch")
    for name in ("int8", "int16", "int32", "uint8"):
        for reduce in (lambda x: x.sum(), lambda x: x.sum(0), lambda x: x.prod(), lambda x: x.cumsum(0),
                       lambda x: x.max(), lambda x: x.argmax(), lambda x: x.float().mean(),
                       lambda x: x.sum(dtype=x.dtype)):
            _same(reduce(_pair(tj, name, [100, 100, 7])), reduce(_pair(torch, name, [100, 100, 7])))
    with pytest.raises(RuntimeError, match="could not infer output dtype.*Got: Char"):
        _pair(tj, "int8", [1]).mean()


def test_integer_index_tensors_follow_torchs_rules():
    x = tj.tensor([1.0, 2.0, 3.0])
    assert x[tj.tensor([2, 0], dtype=tj.int32)].tolist() == [3.0, 1.0]
    assert tj.index_select(x, 0, tj.tensor([1], dtype=tj.int32)).tolist() == [2.0]
    with pytest.raises(IndexError, match="tensors used as indices must be long, int, byte or bool tensors"):
        x[tj.tensor([0], dtype=tj.int8)]
    with pytest.raises(RuntimeError, match="Expected dtype int32 or int64 for index"):
        tj.index_select(x, 0, tj.tensor([1], dtype=tj.int16))
    assert tj.nn.functional.embedding(tj.tensor([1], dtype=tj.int32), tj.eye(2)).tolist() == [[0.0, 1.0]]
    with pytest.warns(UserWarning, match="indexing with dtype torch.uint8 is now deprecated"):
        assert x[tj.tensor([1, 0, 1], dtype=tj.uint8)].tolist() == [1.0, 3.0]   # a mask, as torch


def test_requires_grad_is_refused():
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype can require gradients"):
        tj.zeros(2, dtype=tj.int8, requires_grad=True)
    with pytest.raises(RuntimeError, match="only Tensors of floating point dtype can require gradients"):
        tj.zeros(2, dtype=tj.uint8).requires_grad_()
    # torch trains in float16; tapejit has no tape for narrow floats and refuses
    for dt in (tj.float16, tj.bfloat16):
        with pytest.raises(RuntimeError, match="cannot require gradients"):
            tj.zeros(2, dtype=dt, requires_grad=True)
        with pytest.raises(RuntimeError, match="not differentiable"):
            tj.ones(2, requires_grad=True).to(dt)


def test_printing_is_torchs():
    torch = pytest.importorskip("torch")
    for name, values in (("int8", [1, -128]), ("uint8", [255]), ("int32", 3), ("float16", [1.5, 2.25]),
                         ("bfloat16", [[1.1], [2.2]]), ("int16", [])):
        assert repr(_pair(tj, name, values)) == repr(_pair(torch, name, values)).replace("torch.", "tapejit.")


def test_save_and_load_round_trip_every_dtype():
    for name in SMALL:
        x = _pair(tj, name, [1.5, 2.25, 3] if name.startswith(("float", "bfloat")) else [1, 2, 100])
        buf = io.BytesIO()
        tj.save({"x": x}, buf)
        buf.seek(0)
        y = tj.load(buf)["x"]
        assert y.dtype is x.dtype and tj.equal(y, x)
        assert [r.dtype for r in x] == [x.dtype] * 3 and x.clone().dtype is x.dtype


def test_half_and_bfloat16_round_each_result_as_torch():
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((4, 5)), rng.standard_normal((5, 3))
    for name in ("float16", "bfloat16"):
        x, y = (_pair(tj, name, a), _pair(tj, name, b)), (_pair(torch, name, a), _pair(torch, name, b))
        for op in (lambda L, p, q: p + p * 0.3, lambda L, p, q: p * p, lambda L, p, q: p @ q,
                   lambda L, p, q: p.sum(), lambda L, p, q: p.sum(1), lambda L, p, q: p.exp(),
                   lambda L, p, q: p.softmax(-1), lambda L, p, q: p.mean(0), lambda L, p, q: p.t() @ p[:, :2],
                   lambda L, p, q: p.relu().sqrt(), lambda L, p, q: p.reshape(-1)[3:7] / 3,
                   # torch rounds the number to the tensor's dtype for these, not for * and /
                   lambda L, p, q: p + 1.3, lambda L, p, q: 0.3 - p, lambda L, p, q: p.fmod(0.3),
                   lambda L, p, q: p > 0.1, lambda L, p, q: 3.7 / p, lambda L, p, q: p + q[0, 0].float(),
                   # one float32 kernel in torch, rounded once
                   lambda L, p, q: p.cumsum(1), lambda L, p, q: p.lerp(p * 2, 0.3),
                   lambda L, p, q: L.nn.functional.scaled_dot_product_attention(p, p, p)):
            _same(op(tj, *x), op(torch, *y))
    with warnings.catch_warnings():
        warnings.simplefilter("error")   # no NumPy overflow warning on the way
        _same(_pair(tj, "float16", [70000.0]), _pair(torch, "float16", [70000.0]))   # inf, as torch
    assert _pair(tj, "float16", [1.5]).numpy().dtype == np.float16
    assert (_pair(tj, "float16", [1]) + tj.ones(1)).dtype is tj.float32                   # torch's table
    assert (_pair(tj, "float16", [1]) + _pair(tj, "bfloat16", [1])).dtype is tj.float32
    assert (_pair(tj, "bfloat16", [1, 2]) + tj.tensor(1.0)).dtype is tj.bfloat16          # a 0-d float32
    assert tj.cat([_pair(tj, "bfloat16", [1.1]), _pair(tj, "bfloat16", [2])]).dtype is tj.bfloat16
    from tapejit.tape import current
    n = current().n
    x[0].sum(1), x[0].softmax(-1)   # computed through records in float32, which are dropped again
    assert current().n == n
