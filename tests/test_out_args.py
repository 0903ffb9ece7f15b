"""``out=`` as torch: the result written into ``out`` (returned), resized with torch's
warning when its shape differs and it has elements, torch's cast rule and its refusal when
an argument requires grad with gradients on."""
import warnings

import numpy as np
import pytest

import tapejit as tj

torch = pytest.importorskip("torch")


def _both(call, out_shape, out_dtype="float32"):
    results = []
    for lib in (torch, tj):
        out = lib.zeros(*out_shape, dtype=getattr(lib, out_dtype))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            returned = call(lib, out)
        assert returned is out
        results.append((out.tolist(), tuple(out.shape), str(out.dtype).split(".")[-1],
                        [str(w.message).split(" (Triggered")[0] for w in caught if w.category is UserWarning]))
    return results


@pytest.mark.parametrize("call, out_shape", [
    (lambda lib, out: lib.add(lib.tensor([1.0, 2, 3]), lib.tensor([4.0, 5, 6]), out=out), (3,)),
    (lambda lib, out: lib.add(lib.tensor([1.0, 2, 3]), 2.0, alpha=3, out=out), (3,)),
    (lambda lib, out: lib.mul(lib.tensor([1.0, 2, 3]), lib.tensor([4.0, 5, 6]), out=out), (2,)),
    (lambda lib, out: lib.cat([lib.ones(2), lib.zeros(3)], out=out), (0,)),
    (lambda lib, out: lib.stack([lib.ones(2), lib.zeros(2)], out=out), (5,)),
    (lambda lib, out: lib.matmul(lib.ones(2, 3), lib.ones(3, 2) * 2, out=out), (2, 2)),
    (lambda lib, out: lib.sum(lib.ones(2, 3), 1, out=out), (2,)),
    (lambda lib, out: lib.exp(lib.tensor([0.0, 1.0]), out=out), (2,)),
    (lambda lib, out: lib.zeros(2, 2, out=out), (4,)),
    (lambda lib, out: lib.ones(3, out=out), (3,)),
    (lambda lib, out: lib.arange(5, out=out), (5,)),
    (lambda lib, out: lib.gt(lib.tensor([1.0, 3.0]), 2.0, out=out), (2,)),
    (lambda lib, out: lib.where(lib.tensor([True, False]), lib.ones(2), lib.zeros(2), out=out), (2,)),
    # one of each kind added with issue 17's audit: math, a gather, a reduction, a matrix op
    (lambda lib, out: lib.atan2(lib.tensor([1.0, -2.0]), lib.tensor([3.0, 0.5]), out=out), (2,)),
    (lambda lib, out: lib.gather(lib.tensor([[1.0, 2.0], [3.0, 4.0]]), 1, lib.tensor([[1], [0]]), out=out), (0,)),
    (lambda lib, out: lib.std(lib.tensor([[1.0, 2.0, 4.0], [3.0, 4.0, 7.0]]), 1, out=out), (2,)),
    (lambda lib, out: lib.addcmul(lib.ones(2), lib.tensor([1.0, 2.0]), lib.tensor([3.0, 4.0]), value=0.5, out=out),
     (2,)),
    (lambda lib, out: lib.tril(lib.ones(2, 3), out=out), (2, 3)),
])
def test_out_matches_torch(call, out_shape):
    expected, got = _both(call, out_shape)
    assert got == expected


def test_out_of_another_float_dtype_casts():
    expected, got = _both(lambda lib, out: lib.add(lib.ones(2), lib.ones(2), out=out), (2,), "float64")
    assert got == expected and got[2] == "float64"


def test_float_result_into_integer_out_is_refused():
    with pytest.raises(RuntimeError, match="result type Float can't be cast to the desired output type Long"):
        tj.add(tj.ones(3), tj.ones(3), out=tj.zeros(3, dtype=tj.int64))


def test_out_refuses_arguments_that_require_grad():
    x = tj.ones(3, requires_grad=True)
    message = r"mul\(\): functions with out=\.\.\. arguments don't support automatic differentiation"
    with pytest.raises(RuntimeError, match=message):
        tj.mul(x, 2.0, out=tj.empty(3))
    with pytest.raises(RuntimeError, match="cat"):
        tj.cat([x, x], out=tj.empty(6))
    with pytest.raises(RuntimeError, match="add"):
        tj.add(tj.ones(3), 1.0, out=tj.empty(3, requires_grad=True))
    with tj.no_grad():   # torch: allowed without gradients
        out = tj.empty(3)
        tj.mul(x, 2.0, out=out)
    np.testing.assert_array_equal(out.numpy(), [2.0, 2.0, 2.0])


def test_out_aliasing_an_input():
    a = tj.tensor([1.0, 2.0])
    tj.add(a, a, out=a)
    np.testing.assert_array_equal(a.numpy(), [2.0, 4.0])


def test_out_pair_for_values_and_indices():
    """max/min/sort/topk with a dim take out=(values, indices), as torch's."""
    x = [[3.0, 1.0, 2.0], [0.5, 4.0, -1.0]]
    results = []
    for lib in (torch, tj):
        values, indices = lib.empty(0), lib.empty(0, dtype=lib.int64)
        returned = lib.max(lib.tensor(x), 1, out=(values, indices))
        assert returned[0] is values and returned[1] is indices
        sorted_values, sorted_indices = lib.zeros(2, 3), lib.zeros(2, 3, dtype=lib.int64)
        lib.sort(lib.tensor(x), 1, descending=True, out=(sorted_values, sorted_indices))
        results.append((values.tolist(), indices.tolist(), sorted_values.tolist(), sorted_indices.tolist()))
    assert results[1] == results[0]
