"""Issue 14, item 12: bad scalars and bad arguments give torch's error, never silent garbage.

Each case states torch's behaviour: the tests that compare with torch import it with
``pytest.importorskip`` and run the same call on both libraries (the exception type must
be torch's; a value must have torch's dtype, shape and, for deterministic calls, values).
"""
import gc
import inspect
import math
import operator
import warnings

import numpy as np
import pytest

import tapejit as tj
from tapejit.api import EXPORTS


# ---- comparing one call on both libraries ---------------------------------------------------

def _outcome(call, lib, values=True):
    """``("raise", exception type)`` or ``("value", dtype, shape[, values])`` of ``call(lib)``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            r = call(lib)
        except Exception as e:   # noqa: BLE001 - the type is what is compared
            return ("raise", type(e))
    if not hasattr(r, "shape"):
        return ("value", type(r).__name__)
    dtype = str(r.dtype).split(".")[-1]
    out = ("value", dtype, tuple(r.shape))
    if values:
        out += (np.asarray(r.detach().numpy() if hasattr(r, "detach") else r).tolist(),)
    return out


def _same_as_torch(source, values=True):
    torch = pytest.importorskip("torch")
    call = eval(f"lambda L: {source}", {"np": np, "math": math})   # noqa: S307 - the test's own text
    expected = _outcome(call, torch, values)
    got = _outcome(call, tj, values)
    assert got == expected, f"{source}: torch {expected}, tapejit {got}"
    return got


def _raises_like_torch(source):
    got = _same_as_torch(source)
    assert got[0] == "raise", f"{source}: torch raises, tapejit gave {got}"


# ---- Python ints past int64, uint64 data -----------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.tensor(2**63)",                        # torch: ValueError "Overflow when unpacking long long"
    "L.tensor(-2**63 - 1)",
    "L.tensor([2**63])",
    "L.tensor([1, 2**64])",
    "L.tensor([[1, 2], [3, 2**63]])",
    "L.tensor(2**63, dtype=L.int64)",
    "L.tensor(np.uint64(5))",                 # torch: TypeError "an integer is required"
    "L.tensor([np.uint64(2**64 - 1)])",
])
def test_int_past_int64_raises_as_torch(source):
    _raises_like_torch(source)


@pytest.mark.parametrize("source", [
    "L.tensor(2**63 - 1)", "L.tensor(-2**63)", "L.tensor([1.0, 2**63])",
    "L.tensor(2**63, dtype=L.float32)", "L.tensor([2**70], dtype=L.float64)",
    "L.tensor([2**63], dtype=L.bool)", "L.tensor([1, np.int64(2)])", "L.tensor([2**62 + 1, True])",
])
def test_ints_that_fit_or_convert_are_values_as_torch(source):
    _same_as_torch(source)


def test_error_text_for_int_overflow():
    with pytest.raises(ValueError, match="Overflow when unpacking long long"):
        tj.tensor([2**63])


@pytest.mark.parametrize("make", [tj.tensor, tj.as_tensor, tj.from_numpy])
def test_uint64_array_refused_naming_its_dtype(make):
    # torch 2.13 has a uint64 dtype and keeps 2**64 - 1; tapejit has none, and int64 would
    # wrap it to -1: a TypeError naming the dtype instead.
    with pytest.raises(TypeError, match="uint64"):
        make(np.array([2**64 - 1], np.uint64))


def test_uint64_array_to_a_float_dtype_keeps_its_values():
    torch = pytest.importorskip("torch")
    arr = np.array([2**64 - 1, 3], np.uint64)
    assert tj.tensor(arr, dtype=tj.float64).tolist() == torch.tensor(arr, dtype=torch.float64).tolist()


def test_narrow_numpy_ints_and_floats_keep_their_dtype_or_widen_without_changing_values():
    # torch keeps int32 and float16; uint32, which it has no dtype for, widens to int64
    assert tj.tensor(np.array([7, -3], np.int32)).dtype is tj.int32
    assert tj.tensor(np.array([2**32 - 1], np.uint32)).tolist() == [2**32 - 1]
    assert tj.as_tensor(np.array([0.5], np.float16)).dtype is tj.float16


# ---- floats into int64 -----------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    # torch: RuntimeError "value cannot be converted to type int64 without overflow"
    "L.tensor(float('nan'), dtype=L.int64)", "L.tensor(float('inf'), dtype=L.int64)",
    "L.tensor(1e20, dtype=L.int64)", "L.tensor([1.0, float('nan')], dtype=L.int64)",
    "L.tensor([[1.0], [-1e30]], dtype=L.int64)", "L.tensor([np.float64('nan')], dtype=L.int64)",
])
def test_nan_inf_and_huge_floats_to_int64_raise_as_torch(source):
    _raises_like_torch(source)


@pytest.mark.parametrize("source", [
    "L.tensor([1.5, -2.7], dtype=L.int64)",                      # truncated toward zero
    "L.tensor([1.5, 2**62 + 1, -2.7], dtype=L.int64)",           # ints stay exact
    "L.tensor([float('nan'), 0.0]).to(L.int64)",                  # the C cast, as torch
    "L.tensor([float('nan'), float('inf'), -float('inf'), 1e30], dtype=L.float64).to(L.int64)",
    "L.tensor(np.array([np.nan, 1e30]), dtype=L.int64)",          # arrays: the C cast too
    "L.tensor([float('nan'), 0.0]).to(L.bool)",
    "L.tensor([float('inf')], dtype=L.bool)",
])
def test_float_to_int_conversions_give_torchs_values(source):
    _same_as_torch(source)


# ---- sizes -----------------------------------------------------------------------------------

SIZE_ARGS = ["2.9", "(2, 2.5)", "-1", "(2, -1)", "True", "(True, 2)", "np.int32(2)", "np.float64(2.0)",
             "L.tensor(2)", "L.tensor([2])", "L.tensor(2.)", "L.tensor([2, 3])", "None", "'a'", "[2, 3]",
             "2, 3.0", "2**63", "(2,), 3", "[]", "()", "[[2]]", "L.Size([2, 3])", "(np.int64(2), L.tensor(3))",
             "np.bool_(True)"]


@pytest.mark.parametrize("fn", ["ones", "zeros", "empty", "rand", "randn"])
@pytest.mark.parametrize("args", SIZE_ARGS)
def test_sizes_as_torch(fn, args):
    # torch: a float or bool size is a TypeError ("ones(): argument 'size' (position 1) must be
    # tuple of ints, not float"), a negative one a RuntimeError, a NumPy int or an integer
    # tensor of one element is a size.
    _same_as_torch(f"L.{fn}({args})", values=fn in ("ones", "zeros"))


def test_float_size_error_text():
    with pytest.raises(TypeError, match=r"ones\(\): argument 'size' \(position 1\) must be tuple of ints, not float"):
        tj.ones(2.9)
    with pytest.raises(TypeError, match="found element of type float at pos 1"):
        tj.zeros((2, 2.5))
    with pytest.raises(RuntimeError, match="negative dimension -1"):
        tj.ones(-1)


@pytest.mark.parametrize("source", [
    "L.zeros(2).new_zeros(2.5)", "L.zeros(2).new_ones((2, 2.5))", "L.zeros(2).new_full([1.5], 1.0)",
    "L.full([2.5], 1.)", "L.full((True,), 1.)", "L.full((2, -1), 1.)",
])
def test_sizes_of_the_other_constructors_as_torch(source):
    _raises_like_torch(source)


# ---- full and fill values --------------------------------------------------------------------

@pytest.mark.parametrize("fill", [
    "1.", "1", "True", "np.float32(1.5)", "np.int64(3)", "np.bool_(True)", "L.tensor(1.5)", "L.tensor(2)",
    "L.tensor(True)", "[1., 2.]", "L.tensor([1., 2.])", "L.tensor([1.])", "'a'", "None", "np.array([1., 2.])",
    "np.array(1.)", "float('inf')", "1e39",
])
def test_full_fill_values_as_torch(fill):
    # torch: fill_value must be a Number or a 0-d tensor (TypeError otherwise), and sets
    # the dtype (bool, int64 or the default float); 1e39 overflows float32 (RuntimeError).
    _same_as_torch(f"L.full((2,), {fill})")


@pytest.mark.parametrize("source", [
    "L.full((2,), float('nan'), dtype=L.int64)", "L.full((2,), 2**63)", "L.full((2,), 1e300, dtype=L.int64)",
    "L.full((2,), float('inf'), dtype=L.int64)", "L.full((2,), -1e39)",
    "L.full_like(L.ones(2, dtype=L.int64), float('nan'))", "L.full_like(L.ones(2, dtype=L.int64), 2**63)",
    "L.full_like(L.ones(2), None)", "L.full_like(L.ones(2), 'a')", "L.full_like(L.ones(2), [1., 2.])",
    "L.ones(2).new_full((2,), None)",
])
def test_fill_values_a_dtype_cannot_hold_raise_as_torch(source):
    _raises_like_torch(source)


@pytest.mark.parametrize("source", [
    "L.full((2,), 1.5, dtype=L.int64)", "L.full((2,), 3.7, dtype=L.bool)", "L.full((2,), 1e39, dtype=L.float64)",
    "L.full((2,), 2**63 - 1)", "L.full_like(L.ones(2, dtype=L.int64), 2.5)", "L.full_like(L.ones(2), True)",
])
def test_fill_values_that_convert_as_torch(source):
    _same_as_torch(source)


def test_complex_fill_is_a_type_error():
    # torch makes a complex64 tensor; tapejit has no complex dtype
    with pytest.raises(TypeError, match="complex"):
        tj.full((2,), 1 + 2j)


# ---- random ops on integer dtypes ------------------------------------------------------------

@pytest.mark.parametrize("source", [
    # torch: NotImplementedError '"normal_kernel_cpu" not implemented for 'Long''
    "L.randn(2, dtype=L.int64)", "L.randn(2, dtype=L.bool)", "L.rand(2, dtype=L.int64)",
    "L.rand(2, dtype=L.bool)", "L.randn_like(L.zeros(2, dtype=L.int64))", "L.rand_like(L.zeros(2, dtype=L.int64))",
    "L.rand_like(L.zeros(2, dtype=L.bool))", "L.randn_like(L.zeros(2), dtype=L.int64)",
    "L.randperm(3, dtype=L.bool)", "L.randint(0, 5, (2,), dtype=L.bool)", "L.randint(-1, 2, (2,), dtype=L.bool)",
])
def test_random_ops_refuse_integer_dtypes_as_torch(source):
    _raises_like_torch(source)


def test_random_dtype_error_text():
    with pytest.raises(NotImplementedError, match="\"normal_kernel_cpu\" not implemented for 'Long'"):
        tj.randn(2, dtype=tj.int64)
    with pytest.raises(NotImplementedError, match="\"check_uniform_bounds\" not implemented for 'Bool'"):
        tj.rand_like(tj.zeros(2, dtype=tj.bool))


@pytest.mark.parametrize("source", [
    "L.randint(0, 3, (2,), dtype=L.float64)", "L.randint(3, (2,))", "L.randint(3, (2,), dtype=L.float64)",
    "L.randint(low=1, high=3, size=(2,))", "L.randint(0, 3, ())", "L.randint(0, 2, (3,), dtype=L.bool)",
    "L.randperm(3, dtype=L.float32)", "L.randperm(np.int64(3))", "L.rand(2, dtype=L.float64)",
    "L.randperm(3, dtype=L.float32, requires_grad=True)",
])
def test_random_ops_dtypes_and_shapes_as_torch(source):
    _same_as_torch(source, values=False)


@pytest.mark.parametrize("source", [
    "L.randint(5, 5, (3,))", "L.randint(0, 5.5, (2,))", "L.randint(3, 2)", "L.randint(0, 3, (True,))",
    "L.randint(0, 3, (-1,))", "L.randint(0, 2**63, (2,))", "L.randperm(-1)", "L.randperm(2.5)",
    "L.randperm(True)", "L.randint(0, 3, (2,), requires_grad=True)",
])
def test_random_op_arguments_raise_as_torch(source):
    _raises_like_torch(source)


# ---- arange, linspace, eye ---------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.arange(0, 5, 0)", "L.arange(0, 1, 0.0)", "L.arange(5, 0)", "L.arange(0, 5, -1)", "L.arange(-3)",
    "L.arange(float('nan'))", "L.arange(float('inf'))", "L.arange(float('inf'), 0, -1)", "L.arange(0, 5, float('nan'))",
    "L.arange(None)", "L.arange('a')", "L.arange(0, 3, dtype=L.bool)",
    "L.linspace(0, 1, -1)", "L.linspace(0, 1, 2.5)", "L.linspace(0, 1, True)", "L.linspace(0, 1, None)",
    "L.linspace(None, 1, 3)", "L.linspace('a', 1, 3)", "L.linspace(0, 1, 3, dtype=L.bool)",
    "L.eye(-1)", "L.eye(2, -1)", "L.eye(2.5)", "L.eye(True)", "L.eye(None)", "L.eye(2, 3.5)",
])
def test_range_constructors_raise_as_torch(source):
    _raises_like_torch(source)


@pytest.mark.parametrize("source", [
    "L.arange(5, 5)", "L.arange(0)", "L.arange(2.5)", "L.arange(2**53, 2**53 + 4)", "L.arange(L.tensor(3))",
    "L.arange(L.tensor(3.5))", "L.arange(np.int64(3))", "L.arange(True)", "L.arange(0, 3, True)",
    "L.arange(10, 0, -3)", "L.arange(1, 2**62, 2**61)", "L.arange(0.5, 3, dtype=L.int64)",
    "L.arange(-1.5, 2, dtype=L.int64)", "L.arange(0, 1, 0.1)", "L.arange(3, dtype=float)",
    "L.linspace(0, 1, 0)", "L.linspace(0, 1, 1)", "L.linspace(0, 1, np.int64(3))", "L.linspace(0, 1, L.tensor(3))",
    "L.linspace(L.tensor(0.), L.tensor(1.), 3)", "L.linspace(0, 1, 3, dtype=L.int64)",
    "L.eye(0)", "L.eye(np.int64(2))", "L.eye(L.tensor(2))", "L.eye(3, 2, dtype=L.bool)", "L.eye(2, dtype=float)",
])
def test_range_constructors_values_as_torch(source):
    _same_as_torch(source)


def test_range_error_texts():
    with pytest.raises(RuntimeError, match="step must be nonzero"):
        tj.arange(0, 5, 0)
    with pytest.raises(RuntimeError, match="upper bound and lower bound inconsistent with step sign"):
        tj.arange(5, 0)
    with pytest.raises(RuntimeError, match="number of steps must be non-negative"):
        tj.linspace(0, 1, -1)
    with pytest.raises(RuntimeError, match="n must be greater or equal to 0, got -1"):
        tj.eye(-1)


# ---- dtype arguments, seeds, requires_grad on integers ---------------------------------------

@pytest.mark.parametrize("source", [
    "L.zeros(2, dtype='float32')", "L.tensor([1.], dtype='float32')", "L.zeros(2, dtype=3)",
    "L.arange(3, dtype='int64')", "L.eye(2, dtype='float64')", "L.randn(2, dtype='float32')",
])
def test_dtype_arguments_that_are_no_dtype_raise_as_torch(source):
    _raises_like_torch(source)


@pytest.mark.parametrize("source", [
    "L.zeros(2, dtype=float)", "L.zeros(2, dtype=int)", "L.zeros(2, dtype=bool)", "L.tensor(1, dtype=float)",
    "L.ones(2).to(float)",
])
def test_python_types_as_dtypes_as_torch(source):
    # torch reads float as float64 (as NumPy does), int as int64
    _same_as_torch(source)


def test_numpy_dtypes_stay_accepted():
    # beyond torch: NumPy mode hands out NumPy dtypes (x.dtype), taken as tapejit's
    assert tj.zeros(2, dtype=np.float32).dtype is tj.float32
    assert tj.tensor([1], dtype=np.dtype("float64")).dtype is tj.float64


@pytest.mark.parametrize("seed", ["1.5", "-1", "2**64 - 1", "-2**63", "True", "np.int64(3)", "L.tensor(3)",
                                  "2**64", "-2**63 - 1", "None", "'a'"])
def test_manual_seed_as_torch(seed):
    torch = pytest.importorskip("torch")
    state = torch.random.get_rng_state()
    try:
        expected = _outcome(eval(f"lambda L: L.manual_seed({seed})", {"np": np}), torch)   # noqa: S307
    finally:
        torch.random.set_rng_state(state)
    got = _outcome(eval(f"lambda L: L.manual_seed({seed})", {"np": np}), tj)   # noqa: S307
    assert got[0] == expected[0] and (got[0] == "value" or got == expected), (got, expected)


def test_manual_seed_with_a_float_is_its_int():
    tj.manual_seed(1.5)
    a = tj.rand(3)
    tj.manual_seed(1)
    assert tj.rand(3).tolist() == a.tolist()


@pytest.mark.parametrize("source", [
    "L.tensor([1], requires_grad=True)", "L.tensor([1.], dtype=L.int64, requires_grad=True)",
    "L.zeros(2, dtype=L.int64, requires_grad=True)", "L.ones(2, dtype=L.bool, requires_grad=True)",
    "L.full((2,), 1, requires_grad=True)", "L.arange(3, requires_grad=True)",
    "L.eye(2, dtype=L.int64, requires_grad=True)", "L.empty(2, dtype=L.int64, requires_grad=True)",
    "L.zeros_like(L.zeros(2), dtype=L.int64, requires_grad=True)", "L.randint(0, 3, (2,), requires_grad=True)",
    "L.randperm(3, requires_grad=True)", "L.zeros(2, dtype=L.int64).requires_grad_()",
])
def test_requires_grad_on_integer_tensors_raises_as_torch(source):
    got = _same_as_torch(source)
    assert got == ("raise", RuntimeError)


def test_requires_grad_on_integer_error_text():
    with pytest.raises(RuntimeError, match="Only Tensors of floating point and complex dtype can require gradients"):
        tj.tensor([1], requires_grad=True)


# ---- tensor() of nested data ------------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.tensor([[1, 2], [3]])", "L.tensor([[1, 2], [3, 4, 5]])", "L.tensor([[[1], [2]], [[3], [4, 5]]])",
    "L.tensor([[1], [2, 3]])", "L.tensor([[1], []])",             # torch: ValueError "expected sequence of length 2 at dim 1 (got 1)"
    "L.tensor([[1, 2], 3])", "L.tensor([1, [2]])", "L.tensor([L.tensor(1.), [2.]])",   # torch: TypeError
    "L.tensor('abc')", "L.tensor(b'ab')",                          # torch: TypeError "new(): invalid data type 'str'"
    "L.tensor(['a'])",                                             # torch: ValueError "too many dimensions 'str'"
    "L.tensor(None)", "L.tensor([None])", "L.tensor({1: 2})", "L.tensor({1, 2})", "L.tensor(object())",
    "L.tensor([L.ones(2), L.ones(2)])", "L.tensor([L.zeros(0)])", # torch: ValueError "only one element tensors ..."
])
def test_bad_nested_data_raises_as_torch(source):
    _raises_like_torch(source)


def test_ragged_error_text():
    with pytest.raises(ValueError, match=r"expected sequence of length 2 at dim 1 \(got 1\)"):
        tj.tensor([[1, 2], [3]])
    with pytest.raises(ValueError, match="only one element tensors can be converted to Python scalars"):
        tj.tensor([tj.ones(2), tj.ones(2)])


def test_ragged_after_an_empty_row_raises():
    # torch gives a (2, 0) tensor here, silently dropping the 1; tapejit refuses it
    with pytest.raises(ValueError, match=r"expected sequence of length 0 at dim 1 \(got 1\)"):
        tj.tensor([[], [1]])


@pytest.mark.parametrize("source", [
    "L.tensor([L.ones(1), L.ones(1)])",                   # torch: shape (2,), not (2, 1)
    "L.tensor([L.ones(1, 1)])", "L.tensor([L.tensor(1.), L.tensor(2.)])", "L.tensor([[L.tensor(1.)], [L.tensor(2.)]])",
    "L.tensor([L.tensor(1), L.tensor(2)])", "L.tensor([L.tensor(1), 2.5])", "L.tensor([L.tensor(1., dtype=L.float64), 2.5])",
    "L.tensor([L.tensor(1., dtype=L.float64), L.tensor(2.)])", "L.tensor([1, L.tensor(2.)])", "L.tensor([True, L.tensor(2)])",
    "L.tensor([L.tensor(True), L.tensor(False)])", "L.tensor([L.tensor(1), 2**62])", "L.tensor([[1.], L.tensor([2.])])",
    "L.tensor([[L.tensor(1.), L.tensor(2.)]], dtype=L.float64)", "L.tensor([L.tensor(1), np.float64(2.)])",
    "L.tensor([np.float64(1.), 2.])", "L.tensor([np.float32(1.), 2.])", "L.tensor([np.bool_(True)])",
    "L.tensor([1.5, np.int64(2)])", "L.tensor([2**63 - 1, 1.5])", "L.tensor(np.float64(1.))", "L.tensor(np.float32(1.))",
    "L.tensor(np.array(1.))", "L.tensor([np.array([1., 2.]), np.array([3., 4.])])", "L.tensor(((1, 2), [3, 4]))",
    "L.tensor([[], []])", "L.tensor([])", "L.tensor(())", "L.tensor(range(3))", "L.tensor([range(2), range(2)])",
])
def test_nested_data_values_as_torch(source):
    _same_as_torch(source)


def test_tensor_of_tensors_that_require_grad_has_no_grad():
    # torch: works, with a UserWarning, and the result does not require grad
    x = tj.tensor(1.0, requires_grad=True)
    with pytest.warns(UserWarning, match="requires_grad=True to a scalar"):
        t = tj.tensor([x, x * 2])
    assert t.tolist() == [1.0, 2.0] and not t.requires_grad and t.grad_fn is None


def test_complex_data_is_a_type_error():
    # torch makes a complex64 tensor; tapejit has no complex dtype
    with pytest.raises(TypeError, match="complex"):
        tj.tensor(1 + 2j)


# ---- non-tensor arguments of every front end ----------------------------------------------------

_X = "L.tensor([[1., 2.], [3., 4.]])"
_V = "L.tensor([1., 2.])"
_I = "L.tensor([[1, 2], [3, 4]])"
_VALID = {   # a valid argument for each parameter name (source text, L the library)
    "input": _X, "tensor": _X, "other": _X, "exponent": _X, "mat2": _X, "vec": _V, "vec2": _V,
    "index": "L.tensor([[0, 1], [1, 0]])", "mask": f"{_X} > 2", "condition": f"{_X} > 2", "value": "1.0",
    "src": _X, "min": "0.0", "max": "3.0", "tensors": f"[{_X}, {_X}]", "dim": "0", "dim0": "0", "dim1": "1",
    "size": "(2, 2)", "k": "1", "chunks": "1", "split_size_or_sections": "1", "fill_value": "1.0",
}
_SPECIAL = {   # front ends whose arguments need more than their names
    "index_select": {"index": "L.tensor([1, 0])"}, "mv": {"vec": _V}, "dot": {"self": _V, "input": _V, "other": _V},
    "inner": {"self": _V, "input": _V, "other": _V}, "outer": {"self": _V, "input": _V},
    "ger": {"self": _V, "input": _V}, "bmm": {"self": "L.ones(1, 2, 2)", "input": "L.ones(1, 2, 2)",
                                              "mat2": "L.ones(1, 2, 2)"},
    "clamp": {"min": "0.0"}, "clip": {"min": "0.0"}, "clamp_": {"min": "0.0"}, "clip_": {"min": "0.0"}, "unflatten": {"dim": "1", "sizes": "(1, 2)"},
    "reshape": {"*shape": "4"}, "view": {"*shape": "4"}, "permute": {"*dims": "1, 0"}, "expand": {"*sizes": "2, 2"},
    "repeat": {"*sizes": "1, 1"},
    "bitwise_and": {"self": _I, "input": _I, "other": _I}, "bitwise_or": {"self": _I, "input": _I, "other": _I},
    "bitwise_xor": {"self": _I, "input": _I, "other": _I}, "bitwise_not": {"input": _I},
    "bincount": {"self": "L.tensor([0, 1, 1])", "input": "L.tensor([0, 1, 1])"},
    "repeat_interleave": {"input": "L.tensor([1, 2])"},
    "cross": {"self": "L.ones(2, 3)", "input": "L.ones(2, 3)", "other": "L.ones(2, 3)", "dim": "1"},
    "index_fill": {"index": "L.tensor([1, 0])"}, "index_fill_": {"index": "L.tensor([1, 0])"},
    "scatter": {"src": _X}, "scatter_": {"src": _X}, "select": {"index": "1"},
    "bitwise_and_": {"self": _I, "other": _I}, "bitwise_or_": {"self": _I, "other": _I},
    "bitwise_xor_": {"self": _I, "other": _I}, "bitwise_not_": {"self": _I},
}
# torch's Python-level functions, which fail on a non-tensor with an AttributeError
_TORCH_ATTRIBUTE_ERROR = {"split", "norm"}
_CHECKED = {"input", "tensor", "other", "exponent", "mat2", "vec", "vec2", "index", "mask", "condition",
            "value", "src", "min", "max", "tensors", "*tensors"}
_BAD = ["None", "'a'", "object()"]


def _front_ends():
    """(name, is_method, fn) of every exported function and method."""
    seen = set()
    for public, fn, meth, _ in EXPORTS:
        for name, method in ((public, False), (meth, True)):
            if name is not None and (name, method) not in seen:
                seen.add((name, method))
                yield name, method, fn
    for name in ("numel", "is_floating_point"):
        yield name, False, getattr(tj, name)


def _valid_args(name, method, fn):
    """[(parameter, source, optional)] of a valid call (its required arguments, and those
    ``_SPECIAL`` gives), or None; ``optional``: the parameter's default is None."""
    params = list(inspect.signature(inspect.unwrap(fn)).parameters.values())[1 if method else 0:]
    args = []
    special = _SPECIAL.get(name, {})
    for p in params:
        if p.kind is p.VAR_POSITIONAL:
            if p.name == "tensors":
                args += [("*tensors", _X, False), ("*tensors", _X, False)]
            elif "*" + p.name in special:
                args.append(("*" + p.name, special["*" + p.name], False))
            break
        if p.kind in (p.VAR_KEYWORD, p.KEYWORD_ONLY) or (p.default is not p.empty and p.name not in special):
            break
        source = special.get(p.name, _VALID.get(p.name))
        if source is None:
            return None
        args.append((p.name, source, p.default is None))
    return args


def _source(name, method, args):
    text = ", ".join(source for _, source, _ in args)
    if method:
        return f"({_SPECIAL.get(name, {}).get('self', _X)}).{name}({text})"
    return f"L.{name}({text})"


def _sweep_cases():
    for name, method, fn in _front_ends():
        args = _valid_args(name, method, fn)
        for i, (param, _, optional) in enumerate(args or ()):
            if param not in _CHECKED or (param == "*tensors" and i == 0):
                continue
            for bad in _BAD[1:] if optional else _BAD:   # None is the default there
                bad_args = list(args)
                bad_args[i] = (param, f"[{_X}, {bad}]" if param == "tensors" else bad, optional)
                yield pytest.param(name, method, _source(name, method, args), _source(name, method, bad_args),
                                   id=f"{'x.' if method else 'tj.'}{name}-{param}-{bad}")


def test_the_sweep_covers_the_front_ends():
    covered = {(p.values[0], p.values[1]) for p in _sweep_cases()}
    assert {("exp", False), ("add", True), ("cat", False), ("stack", False),
            ("matmul", False), ("sum", False), ("numel", False), ("zeros_like", False), ("gather", True),
            ("broadcast_tensors", False), ("masked_fill", True)} <= covered
    assert len(covered) > 100


@pytest.mark.parametrize("name, method, valid, source", list(_sweep_cases()))
def test_non_tensor_arguments_raise_type_error(name, method, valid, source):
    """Every function and method of the front-end table, given None, a string or an
    object() for each tensor argument, raises torch's TypeError naming the function (never
    an AttributeError about ``_dtype``, nor a result); torch raises TypeError too."""
    eval(f"lambda L: {valid}", {"np": np})(tj)   # noqa: S307 - the table's valid call works
    call = eval(f"lambda L: {source}", {"np": np})   # noqa: S307
    with pytest.raises(TypeError) as info:
        call(tj)
    message = str(info.value)
    assert f"{name}()" in message, message
    torch = pytest.importorskip("torch")
    if (hasattr(torch.Tensor, name) if method else hasattr(torch, name)) and name not in _TORCH_ATTRIBUTE_ERROR:
        assert _outcome(call, torch)[0:2] == ("raise", TypeError), f"{source}: torch {_outcome(call, torch)}"


def test_argument_error_texts_are_torchs():
    x = tj.ones(2)
    cases = [
        (lambda: tj.exp("a"), "exp(): argument 'input' (position 1) must be Tensor, not str"),
        (lambda: tj.exp(None), "exp(): argument 'input' (position 1) must be Tensor, not NoneType"),
        (lambda: tj.sum(np.ones(2)), "sum(): argument 'input' (position 1) must be Tensor, not numpy.ndarray"),
        (lambda: tj.cat([x, None]), "expected Tensor as element 1 in argument 0, but got NoneType"),
        (lambda: tj.stack([x, 1]), "expected Tensor as element 1 in argument 0, but got int"),
        (lambda: tj.cat(None), "cat(): argument 'tensors' (position 1) must be tuple of Tensors, not NoneType"),
        (lambda: tj.matmul(x, None), "matmul(): argument 'other' (position 2) must be Tensor"),
        (lambda: x.add(None), "add(): argument 'other' (position 1) must be Tensor"),
        (lambda: tj.mm(x, "a"), "mm(): argument 'mat2' (position 2) must be Tensor, not str"),
        (lambda: tj.zeros_like(None), "zeros_like(): argument 'input' (position 1) must be Tensor, not NoneType"),
    ]
    for call, text in cases:
        with pytest.raises(TypeError) as info:
            call()
        assert text in str(info.value)


BINARY = ["add", "sub", "mul", "truediv", "floordiv", "mod", "pow", "matmul", "and_", "or_", "xor",
          "lt", "le", "gt", "ge", "iadd", "isub", "imul", "itruediv", "ipow"]


@pytest.mark.parametrize("op", BINARY)
@pytest.mark.parametrize("bad", ["'a'", "None", "object()"])
def test_operators_with_unsupported_operands_raise_pythons_type_error(op, bad):
    # torch's operators return NotImplemented, so Python raises "unsupported operand
    # type(s) for +: 'Tensor' and 'str'" (the message is Python's, and the same)
    torch = pytest.importorskip("torch")
    fn = getattr(operator, op)
    value = eval(bad)   # noqa: S307
    for left in (True, False):
        if not left and op.startswith("i"):
            continue
        outcomes = []
        for lib in (torch, tj):
            x = lib.tensor([1.0, 2.0])
            try:
                outcomes.append(("value", fn(x, value) if left else fn(value, x)))
            except Exception as e:   # noqa: BLE001
                outcomes.append((type(e), str(e)))
        assert outcomes[1] == outcomes[0], (op, bad, left, outcomes)
        assert outcomes[0][0] is TypeError or (op, bad, left) == ("mod", "'a'", False)   # 'a' % x formats a string


@pytest.mark.parametrize("bad", ["'a'", "None", "object()"])
def test_equality_with_unsupported_operands_is_pythons(bad):
    torch = pytest.importorskip("torch")
    value = eval(bad)   # noqa: S307
    for op in (operator.eq, operator.ne):
        assert op(tj.ones(2), value) is op(torch.ones(2), value)
        assert op(value, tj.ones(2)) is op(value, torch.ones(2))


def test_operator_defers_to_the_other_operands_reflection():
    class Other:
        def __radd__(self, x):
            return "radd"

        def __rsub__(self, x):
            return "rsub"

        def __rmatmul__(self, x):
            return "rmatmul"

    x = tj.ones(2)
    assert (x + Other(), x - Other(), x @ Other()) == ("radd", "rsub", "rmatmul")


def test_in_place_methods_with_non_tensors_raise_type_error():
    x = tj.ones(2)
    for bad in (None, "a", object()):
        for method in ("add_", "sub_", "mul_", "div_", "copy_"):
            with pytest.raises(TypeError):
                getattr(x, method)(bad)


def test_lists_and_arrays_stay_operands():
    # beyond torch: tapejit takes a list or NumPy array where a tensor operand is expected
    x = tj.tensor([1.0, 2.0])
    assert (x + [1.0, 2.0]).tolist() == [2.0, 4.0]
    assert tj.add(x, np.array([1.0, 1.0])).tolist() == [2.0, 3.0]
    assert tj.where(x > 1, x, [0.0, 0.0]).tolist() == [0.0, 2.0]
    # an index is not an operand: as torch, index_select wants an integer tensor
    with pytest.raises(TypeError, match=r"index_select\(\): argument 'index' .*must be Tensor, not list"):
        tj.index_select(x, 0, [1])


# ---- grad_fn identity -------------------------------------------------------------------------

def test_grad_fn_is_the_same_object_at_every_access():
    x = tj.ones(2, requires_grad=True)
    w = tj.tensor(3.0, requires_grad=True)
    y = (x * w).exp().sum()
    assert y.grad_fn is y.grad_fn
    nodes = y.grad_fn.next_functions
    assert nodes[0][0] is y.grad_fn.next_functions[0][0]
    mul = nodes[0][0].next_functions[0][0]
    assert mul is y.grad_fn.next_functions[0][0].next_functions[0][0]
    leaf = mul.next_functions[0][0]
    assert type(leaf).__name__ == "AccumulateGrad" and leaf.variable is x
    assert leaf is mul.next_functions[0][0]


def test_grad_fn_of_an_intermediate_is_its_consumers_next_function():
    x = tj.ones(2, requires_grad=True)
    h = x * 2
    y = h.sin()
    assert y.grad_fn.next_functions[0][0] is h.grad_fn


def test_grad_fn_cache_keeps_no_graph_alive():
    import weakref
    x = tj.ones(2, requires_grad=True)
    y = (x * 2).exp()
    node = y.grad_fn
    ref = weakref.ref(node)
    del node, y
    gc.collect()
    assert ref() is None
    tj.tape.retire_current()   # the next graph may reuse the old tape: it must not see the old nodes
    z = (x + 1).sin()
    assert type(z.grad_fn).__name__ == "SinBackward0"
    assert z.grad_fn.next_functions[0][0].name() == "AddBackward0"


def test_grad_fn_after_in_place_is_the_new_node():
    x = tj.ones(2, requires_grad=True)
    y = x * 2
    before = y.grad_fn
    y.mul_(3)
    assert y.grad_fn is not before and y.grad_fn is y.grad_fn
    assert y.grad_fn.next_functions[0][0] is before


@pytest.mark.parametrize("init, kernel", [("normal_", "normal_kernel_cpu"), ("uniform_", "check_uniform_bounds")])
def test_random_init_of_an_integer_tensor_raises_as_torch(init, kernel):
    # torch: NotImplementedError: "normal_kernel_cpu" not implemented for 'Long'; NumPy's
    # samples written into an int64 tensor would be truncated silently.
    with pytest.raises(NotImplementedError, match=f'"{kernel}" not implemented for \'Long\''):
        getattr(tj.nn.init, init)(tj.zeros(3, dtype=tj.int64))


# ---- dtype= arguments are dtypes -------------------------------------------------------------

@pytest.mark.parametrize("source", [
    "L.tensor([1.0, 2.0]).sum(dtype='float64')", "L.sum(L.tensor([1.0, 2.0]), 0, dtype='float64')",
    "L.tensor([1.0, 2.0]).mean(dtype='float64')", "L.tensor([1.0, 2.0]).prod(dtype='float64')",
    "L.tensor([1.0, 2.0]).norm(dtype='float64')", "L.tensor([1.0, 2.0]).cumsum(0, dtype='float64')",
    "L.tensor([1.0, 2.0]).softmax(0, dtype='float64')", "L.tensor([1.0, 2.0]).log_softmax(0, dtype='float64')",
    "L.nn.functional.softmax(L.tensor([1.0, 2.0]), 0, dtype='float64')", "L.tensor([1.0, 2.0]).sum(dtype=3)",
])
def test_a_dtype_argument_that_is_not_a_dtype_is_a_type_error(source):
    # torch 2.13: TypeError ("argument 'dtype' must be torch.dtype, not str"); a string was
    # read as a device here (RuntimeError)
    assert _same_as_torch(source) == ("raise", TypeError)


@pytest.mark.parametrize("source", [
    "L.tensor([1.0, 2.0]).sum(dtype=L.float64)", "L.tensor([1.0, 2.0]).mean(1 - 1, dtype=L.float64)",
    "L.tensor([1.0, 2.0]).prod(dtype=L.float64)", "L.tensor([3.0, 4.0]).norm(dtype=L.float64)",
    "L.tensor([1, 2]).sum(dtype=L.float32)", "L.tensor([True, True]).cumsum(0)",
    "L.tensor([1, 2]).cumsum(0, dtype=L.float64)", "L.tensor([1.0, 2.0]).sum(dtype=float)",
    "L.tensor([0.0, 0.0]).softmax(0, dtype=L.float64)",
])
def test_a_dtype_argument_computes_in_that_dtype(source):
    _same_as_torch(source)


def test_a_reduction_in_float64_of_a_float32_tensor_has_a_float32_gradient():
    # torch 2.13: sum(dtype=torch.float64) is float64, the leaf's gradient float32
    for lib in (tj, pytest.importorskip("torch")):
        x = lib.tensor([1.0, 2.0], requires_grad=True)
        y = x.sum(dtype=lib.float64)
        y.backward()
        assert (str(y.dtype), str(x.grad.dtype), x.grad.tolist()) == (
            f"{lib.__name__}.float64", f"{lib.__name__}.float32", [1.0, 1.0])


# ---- nn.functional and in-place methods name the argument that is not a tensor -------------------

@pytest.mark.parametrize("source", [
    "L.nn.functional.relu(None)", "L.nn.functional.relu('a', inplace=True)", "L.nn.functional.leaky_relu(None)",
    "L.nn.functional.silu(None)", "L.nn.functional.elu(None)", "L.nn.functional.gelu(None)",
    "L.nn.functional.softplus(None)", "L.nn.functional.softplus('a', beta=2.0)",
    "L.nn.functional.linear(None, L.ones(2, 2))", "L.nn.functional.linear(L.ones(2, 2), None)",
    "L.nn.functional.linear(L.ones(2, 2), L.ones(2, 2), 'b')", "L.nn.functional.dropout(None, training=False)",
    "L.nn.functional.layer_norm(None, [2])", "L.nn.functional.layer_norm(L.ones(2, 2), [2], 'w')",
    "L.nn.functional.embedding(L.tensor([0]), None)", "L.nn.functional.embedding(None, L.ones(2, 2))",
    "L.nn.functional.one_hot(None)", "L.nn.functional.cross_entropy(None, L.tensor([0]))",
    "L.nn.functional.nll_loss(None, L.tensor([0]))",
])
def test_nn_functional_refuses_a_non_tensor_with_torchs_type_error(source):
    # torch 2.13: TypeError "<fn>(): argument '<name>' (position k) must be Tensor, not ..."
    # (these raised AttributeError on an internal attribute)
    assert _same_as_torch(source) == ("raise", TypeError)


@pytest.mark.parametrize("source", [
    "L.nn.functional.sigmoid(None)", "L.nn.functional.tanh(None)", "L.nn.functional.softmax('a', 0)",
    "L.nn.functional.log_softmax(None, 0)", "L.nn.functional.normalize(None)",
])
def test_nn_functional_written_on_tensor_methods_raises_attribute_error_as_torch(source):
    # torch 2.13 implements these in Python on the tensor's methods: AttributeError
    assert _same_as_torch(source) == ("raise", AttributeError)


def test_nn_functional_type_errors_name_the_function_and_argument():
    F = tj.nn.functional
    cases = [(lambda: F.relu(None), "relu(): argument 'input' (position 1) must be Tensor, not NoneType"),
             (lambda: F.softplus("a"), "softplus(): argument 'input' (position 1) must be Tensor, not str"),
             (lambda: F.linear(tj.ones(2, 2), None), "linear(): argument 'weight' (position 2) must be Tensor"),
             (lambda: F.embedding(tj.tensor([0]), None), "embedding(): argument 'weight' (position 1)"),
             (lambda: F.embedding(None, tj.ones(2, 2)), "embedding(): argument 'indices' (position 2)")]
    for call, text in cases:   # torch 2.13's messages
        with pytest.raises(TypeError) as info:
            call()
        assert text in str(info.value)


@pytest.mark.parametrize("method", ["add_", "sub_", "mul_", "div_", "pow_"])
def test_an_in_place_method_names_itself_for_a_non_tensor(method):
    # torch 2.13: TypeError "add_(): argument 'other' (position 1) must be Tensor, not NoneType"
    _raises_like_torch(f"L.zeros(2).{method}(None)")
    with pytest.raises(TypeError, match=rf"^{method}\(\): argument '(other|exponent)' \(position 1\)"):
        getattr(tj.zeros(2), method)(None)
    # the method has the out-of-place function's parameters (help(), inspect)
    assert ("exponent" if method == "pow_" else "other") in inspect.signature(getattr(tj.Tensor, method)).parameters


# ---- unflatten --------------------------------------------------------------------------------

@pytest.mark.parametrize("dim, sizes", [
    (1, (3, 5)), (1, (-1, 3)), (2, (2, 5)), (-3, (2, 5)), (1, (-1, -1)), (1, ()), (1, (2, -2)),
    (1, (0, -1)), (1, (3.0, 5)), (1, (True, 10)), (1, 10), (1, [2, 5]), (-1, (5, -1)), (0, (1, 2)),
])
def test_unflatten_checks_as_torch(dim, sizes):
    _same_as_torch(f"L.zeros(2, 10).unflatten({dim}, {sizes!r})")


def test_unflatten_messages_are_torchs():
    x = tj.zeros(2, 10)
    cases = [  # torch 2.13's texts
        ((1, (3, 5)), RuntimeError,
         "unflatten: Provided sizes [3, 5] don't multiply up to the size of dim 1 (10) in the input tensor"),
        ((2, (2, 5)), IndexError, "Dimension out of range (expected to be in range of [-2, 1], but got 2)"),
        ((1, ()), RuntimeError, "unflatten: sizes must be non-empty"),
        ((1, (-1, -1)), RuntimeError, "only one dimension can be inferred"),
        ((1, (2, -2)), RuntimeError, "invalid shape dimension -2 at index 1 of shape [2, -2]"),
        ((1, (3.0, 5)), TypeError, "unflatten(): argument 'sizes' (position 2) must be tuple of ints, but found "
                                   "element of type float at pos 0"),
    ]
    for args, kind, text in cases:
        with pytest.raises(kind) as info:
            x.unflatten(*args)
        assert text in str(info.value)
    with pytest.raises(RuntimeError, match="Dimension specified as 0 but tensor has no dimensions"):
        tj.zeros(()).unflatten(0, (1,))
    with pytest.raises(RuntimeError, match="cannot reshape tensor of 0 elements into shape \\[0, -1\\]"):
        tj.zeros(0, 3).unflatten(0, (0, -1))


# ---- int64 arithmetic with Python ints beyond int64 ---------------------------------------------

@pytest.mark.parametrize("source", [
    "L.tensor([1, 2]) + 2**63", "2**63 + L.tensor([1, 2])", "L.tensor([1, 2]) - 2**63", "2**63 - L.tensor([1, 2])",
    "L.tensor([1, 2]) * 2**63", "L.tensor([1, 2]).add(L.tensor([1, 2]), alpha=2**63)",
    "L.tensor([1, 2]).add_(2**63)", "L.tensor([1, 2]) + (-2**63 - 1)", "L.tensor([True]) + 2**63",
])
def test_an_int_beyond_int64_with_an_int_tensor_raises(source):
    # torch 2.13 reads an int in [2**63, 2**64) as uint64 wrapped to a negative int64 (its
    # x + 2**63 equals x - 2**63, and x < 2**63 is False) and raises OverflowError or
    # RuntimeError beyond; tapejit refuses every int int64 cannot hold (OverflowError,
    # torch's type for "int too big to convert"), never a wrapped value
    with pytest.raises(OverflowError, match="does not fit in int64"):
        eval(source, {"L": tj})   # noqa: S307 - the test's own text


def test_int64_limits_and_comparisons_with_big_ints_stay_exact():
    x = tj.tensor([1, 2])
    assert (x + (2**63 - 1)).tolist() == [-2**63, -2**63 + 1]   # int64 wraps, as torch's (its own overflow)
    assert (x - (2**63 - 1)).tolist() == [-2**63 + 2, -2**63 + 3]
    assert (x < 2**63).tolist() == [True, True]     # exact (torch 2.13 says False: the wrapped value)
    assert (x.float() + 2**63).dtype == tj.float32   # a float tensor takes it as a float, as torch


# ---- a tensor's array has its dtype ------------------------------------------------------------

@pytest.mark.parametrize("np_dtype, tapejit_dtype", [
    ("float16", "float16"), ("int32", "int32"), ("uint8", "uint8"), (">f8", "float64"), ("int8", "int8"),
    ("uint16", "int32"), ("uint32", "int64"), (">i2", "int16"),
])
def test_an_array_of_another_dtype_becomes_a_tensor_of_the_dtype_holding_it(np_dtype, tapejit_dtype):
    from tapejit.tensor import _concrete
    t = _concrete(np.array([1, 2], np_dtype))
    assert t.dtype == getattr(tj, tapejit_dtype) and t._data.dtype == t.dtype.np
    assert (t * 2).tolist() == [2, 4]


@pytest.mark.parametrize("np_dtype", ["uint64", "complex128", "longdouble", "U1"])
def test_an_array_no_dtype_holds_is_refused(np_dtype):
    from tapejit.tensor import _concrete
    with pytest.raises(TypeError, match="no such dtype"):
        _concrete(np.zeros(2, np_dtype))
