"""``repr`` of tensors in PyTorch's format: ``tensor([1., 2.], grad_fn=<MulBackward0>)``."""
import numpy as np

from tapejit import dtypes


def _format_values(arr):
    if arr.dtype == np.bool_:
        body = np.array2string(arr, separator=", ")
    elif arr.dtype.kind == "f":
        if arr.dtype == np.float16:   # formatted as float32 (exact), NumPy would warn comparing with 1e8
            arr = arr.astype(np.float32)
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
    dt = t._dtype
    if dt is not dtypes.float32 and dt is not dtypes.bool_ and (dt is not dtypes.int64 or arr.size == 0):
        extras.append(f"dtype=tapejit.{dt.name}")   # torch names every dtype but its defaults
    if arr.size == 0 and arr.shape != (0,):   # torch: tensor([]) for 1-D, tensor([], size=(2, 0)) else
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
    return f"torch.{dtypes.SCALAR_TYPE_NAMES[t._dtype.name]}Tensor"
