"""The one place that owns Numba options.

Every compiled function in tapejit goes through these decorators so that caching,
the error model and bounds checking are decided once.  ``NUMBA_BOUNDSCHECK=1`` in the
environment turns on bounds checks everywhere (Numba reads it itself; a CI lane uses it
to catch slot-index bugs that would otherwise corrupt memory).
"""
from llvmlite import ir
from numba import njit, types
from numba.core import cgutils, errors
from numba.extending import intrinsic, overload
from numba.np import numpy_support

from tapejit._numba_load import disk_cached

# error_model="numpy": a division by zero gives inf/nan as NumPy and PyTorch do,
# instead of raising inside a sweep where the traceback would be useless.
_COMMON = dict(error_model="numpy", nogil=True)


def rule(fn):
    """A scalar forward value or derivative rule.  Not compiled on its own: the generator
    copies its body into the sweeps (``tapejit/_inline.py``), so importing tapejit builds
    no Numba dispatcher per rule.  ``py_func`` mirrors a dispatcher's, for the generator."""
    fn.py_func = fn
    return fn


# Called only from compiled code: no Python wrapper to compile.
_CALLEE = dict(no_cpython_wrapper=True, no_cfunc_wrapper=True, **_COMMON)


def helper(fn):
    """A small compiled function that kernels and sweeps call (accumulation, flags)."""
    return njit(**_CALLEE)(fn)


def kernel(fn):
    """A whole-record kernel (matmul, reductions, data movement), compiled in its op's sweeps.

    Applied twice: in the op module it only marks the function (``py_func``, as on a
    dispatcher); the generated sweep module applies it again to a marked function and gets
    a dispatcher that Numba inlines into the op's sweep (tapejit/codegen.py): compiled on
    its own and then linked in, a kernel's code would be compiled twice."""
    if getattr(fn, "py_func", None) is fn:
        return njit(inline="always", **_CALLEE)(fn)
    fn.py_func = fn
    return fn


def small_kernel(fn):
    """A ``kernel`` run once per record in scalar graphs (copies, stack, small softmax).
    Every kernel is inlined into its op's sweep, so this is ``kernel`` (the op modules name
    both, for the reader)."""
    return kernel(fn)


def overloaded(stub):
    """Compile calls to the plain-Python ``stub`` inside kernels as the implementation the
    decorated function returns for the argument types (Numba's ``overload``).  The stub keeps
    it as ``overload_impl``, so the registry hash sees an edit to it."""
    def register(implementation):
        overload(stub)(implementation)
        stub.overload_impl = implementation
        return implementation
    return register


def sweep(fn):
    """An entry point called from Python: cached on disk so a second process does not compile,
    in tapejit's private cache folder, and loaded without Numba's compiler set-up
    (tapejit/_numba_load.py; not ``cache=True``, which would choose Numba's folders)."""
    return disk_cached(njit(**_COMMON)(fn))


def parallel_sweep(fn):
    """An entry point whose ``prange`` loops run across cores (batched replay)."""
    return disk_cached(njit(parallel=True, **_COMMON)(fn))


# ---- op sweeps, called through their addresses ------------------------------------------
#
# tapejit/codegen.py compiles each op's sweep over a run of its records on its own
# (``op_sweep``), apart from the entry points that Python calls (``sweep``): an entry point
# walks the records and calls, for each run, its op's sweep through the address a table
# holds.  A caller compiled by Numba links in the code of every function it calls directly,
# then optimises and compiles it again; called through an address, an op's code is compiled
# once, cached once, and a new op compiles only itself.  The call passes one pointer to a
# ``frame`` (the arrays' data addresses and shapes) instead of the arrays, whose fields
# would be dozens of arguments per call.

def op_sweep(fn):
    """An op's sweep over a run of its records, ``(frame, r, end, zero) -> next r``: cached
    on disk; called only through its address (``address``), so it has no Python wrapper."""
    return disk_cached(njit(no_cpython_wrapper=True, no_cfunc_wrapper=True, **_COMMON)(fn))


def op_sweep_signature(dtype):
    """The argument types of an ``op_sweep`` for arena values of NumPy ``dtype``."""
    return (types.CPointer(types.int64), types.int64, types.int64, numpy_support.from_dtype(dtype))


def address(dispatcher, args):
    """The address of ``dispatcher``'s compiled code for argument types ``args``, loaded from
    the cache or compiled first: what ``call`` calls."""
    dispatcher.compile(args)
    result = dispatcher.overloads[tuple(args)]
    return result.library.get_pointer_to_function(result.fndesc.llvm_func_name)


@intrinsic
def frame(typingctx, items):
    """A stack array of int64 for an ``op_sweep``: for each array in tuple ``items``
    (C-contiguous, so that a data address and a shape describe it) its data address then
    its shape, and for each integer or boolean its value."""
    for ty in items.types:
        if isinstance(ty, types.Array):
            if ty.layout != "C":
                raise errors.TypingError(f"frame: {ty} is not C-contiguous")
        elif not isinstance(ty, (types.Integer, types.Boolean)):
            raise errors.TypingError(f"frame: cannot pass {ty}")
    size = sum(1 + ty.ndim if isinstance(ty, types.Array) else 1 for ty in items.types)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        slots = cgutils.alloca_once(builder, i64, size=size, name="frame")
        k = 0
        for i, ty in enumerate(items.types):
            value = builder.extract_value(args[0], i)
            if isinstance(ty, types.Array):
                array = context.make_array(ty)(context, builder, value)
                fields = [builder.ptrtoint(array.data, i64)] + cgutils.unpack_tuple(builder, array.shape)
            else:
                fields = [context.cast(builder, value, ty, types.int64)]
            for field in fields:
                builder.store(field, builder.gep(slots, [ir.Constant(i64, k)]))
                k += 1
        return slots

    return types.CPointer(types.int64)(items), codegen


@intrinsic
def pointer(typingctx, address, like):
    """Integer ``address`` (from a ``frame``) as a pointer to values of ``like``'s type
    (a number, or a NumPy number class such as ``np.uint8``)."""
    target = like.instance_type if isinstance(like, types.NumberClass) else like
    if not isinstance(address, types.Integer) or not isinstance(target, types.Number):
        raise errors.TypingError(f"pointer: needs an integer address and a number type, got {address}, {like}")

    def codegen(context, builder, signature, args):
        return builder.inttoptr(args[0], context.get_value_type(types.CPointer(target)))

    return types.CPointer(target)(address, like), codegen


@intrinsic
def call(typingctx, address, args):
    """Call the ``op_sweep`` compiled at integer ``address`` with the tuple ``args``
    (a frame, two record indices, a zero of the arena's dtype), as Numba calls a compiled
    function (its calling convention: an exception it raises propagates).  Returns its
    int64 result."""
    wanted = [types.CPointer(types.int64), types.int64, types.int64]
    given = list(args.types)
    if (len(given) != 4 or given[0] != wanted[0] or not all(isinstance(t, types.Integer) for t in given[1:3])
            or given[3] not in (types.float32, types.float64)):
        raise errors.TypingError(f"call: an op sweep takes (frame, int, int, zero), got {args}")
    argtypes = wanted + [given[3]]

    def codegen(context, builder, signature, llargs):
        values = [context.cast(builder, builder.extract_value(llargs[1], i), given[i], argtypes[i])
                  for i in range(4)]
        fnty = context.call_conv.get_function_type(types.int64, argtypes)
        function = builder.inttoptr(llargs[0], fnty.as_pointer())
        status, result = context.call_conv.call_function(builder, function, types.int64, argtypes, values)
        with cgutils.if_unlikely(builder, status.is_error):
            context.call_conv.return_status_propagate(builder, status)
        return result

    return types.int64(address, args), codegen


@intrinsic
def callback(typingctx, address, kind, op, arena):
    """Call the C function ``int64 f(int64, int64, int64)`` at integer ``address`` (the
    loader of tapejit/codegen.py, a ctypes callback, which takes the GIL itself)."""
    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        function = builder.inttoptr(args[0], ir.FunctionType(i64, [i64, i64, i64]).as_pointer())
        values = [context.cast(builder, v, t, types.int64) for v, t in zip(args[1:], signature.args[1:])]
        return builder.call(function, values)

    return types.int64(address, kind, op, arena), codegen
