"""``repr`` of tensors in PyTorch's format: ``tensor([1., 2.], grad_fn=<MulBackward0>)``."""
import numpy as np

from tapejit import dtypes


def _format_values(arr):
    if arr.dtype == np.bool_:
        body = np.array2string(arr, separator=", ")
    elif arr.dtype.kind == "f":
        finite = arr[np.isfinite(arr)]
        use_sci = finite.size and (np.abs(finite).max() >= 1e8 or
                                   (np.abs(finite[finite != 0]).min() < 1e-4 if (finite != 0).any() else False))
        all_int = finite.size == 0 or np.all(finite == np.round(finite))
        if use_sci:
            raw = lambda x: f"{x:.4e}"  # noqa: E731
        elif all_int:
            raw = lambda x: f"{x:.0f}." if np.isfinite(x) else str(x)  # noqa: E731
        else:
            raw = lambda x: f"{x:.4f}" if np.isfinite(x) else str(x)  # noqa: E731
        # PyTorch right-aligns every element to the widest one.
        width = max((len(raw(x)) for x in arr.reshape(-1)[:2000].tolist()), default=0)
        body = np.array2string(arr, separator=", ", formatter={"float_kind": lambda x: raw(x).rjust(width)},
                               threshold=1000, edgeitems=3, max_line_width=80)
    else:
        body = np.array2string(arr, separator=", ", threshold=1000, edgeitems=3, max_line_width=80)
    return body.replace("\n", "\n       ")


def tensor_repr(t):
    arr = t._value()
    extras = []
    if t._dtype is dtypes.float64:
        extras.append("dtype=tapejit.float64")
    elif t._dtype is dtypes.int64 and arr.size == 0:
        extras.append("dtype=tapejit.int64")
    if arr.size == 0:
        extras.insert(0, f"size={tuple(arr.shape)}")
    if t._rg:
        if t._tape is not None:
            extras.append(f"grad_fn=<{t.grad_fn.name()}>")
        else:
            extras.append("requires_grad=True")
    body = _format_values(arr)
    if extras:
        return f"tensor({body}, {', '.join(extras)})"
    return f"tensor({body})"


def type_name(t):
    """PyTorch's legacy type name, as used in its error messages."""
    names = {"float32": "FloatTensor", "float64": "DoubleTensor", "int64": "LongTensor", "bool": "BoolTensor"}
    return f"torch.{names[t._dtype.name]}"
