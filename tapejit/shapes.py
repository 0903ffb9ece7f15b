"""Shape arithmetic shared by the front ends: dims, reductions' layouts, numel."""


def numel(shape):
    n = 1
    for s in shape:
        n *= s
    return n


def wrap_dim(dim, ndim, op):
    n = max(ndim, 1)
    if not -n <= dim < n:
        raise IndexError(
            f"{op}: Dimension out of range (expected to be in range of [{-n}, {n - 1}], but got {dim})")
    return dim % n


def reduced_dims(dim, ndim, op):
    """Sorted tuple of dims to reduce (``None`` = all)."""
    if dim is None:
        return tuple(range(ndim))
    dims = (dim,) if isinstance(dim, int) else tuple(dim)
    if not dims:
        return tuple(range(ndim))  # torch: an empty dim list reduces over every dim
    if ndim == 0:
        for d in dims:
            wrap_dim(d, 0, op)
        return ()
    out = sorted({wrap_dim(d, ndim, op) for d in dims})
    if len(out) != len(dims):
        raise RuntimeError(f"{op}: dim appears multiple times in the list of dims")
    return tuple(out)


def reduced_shape(shape, dims, keepdim):
    if keepdim:
        return tuple(1 if i in dims else s for i, s in enumerate(shape))
    return tuple(s for i, s in enumerate(shape) if i not in dims)


def sum_layout(shape, dims):
    """``[ndim, out size, sizes..., out strides...]`` for the sum kernel, with runs of
    dims that are all reduced or all kept merged so the walker has few dims."""
    groups = []
    for i, s in enumerate(shape):
        red = i in dims
        if groups and groups[-1][1] == red:
            groups[-1][0] *= s
        else:
            groups.append([s, red])
    if not groups:
        groups = [[1, True]]
    out_strides = []
    acc = 1
    for size, red in reversed(groups):
        out_strides.append(0 if red else acc)
        if not red:
            acc *= size
    out_strides.reverse()
    sizes = [g[0] for g in groups]
    return [len(sizes), acc] + sizes + out_strides


def axis_layout(shape, dims):
    """``(outer, length, inner)`` when ``dims`` are adjacent, else ``None``."""
    if not dims:
        return numel(shape), 1, 1
    if list(dims) != list(range(dims[0], dims[-1] + 1)):
        return None
    outer = numel(shape[:dims[0]])
    length = numel(shape[dims[0]:dims[-1] + 1])
    inner = numel(shape[dims[-1] + 1:])
    return outer, length, inner
