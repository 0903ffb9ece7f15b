"""tapejit.load(weights_only=True) against corrupt and hostile files: more than 10,000
mutations of valid files (every truncation of a small one, bit flips, byte inserts and
deletes, overwrites, opcodes swapped in, splices) and hand-made malicious pickles
(NumPy's own pickle, code execution, bad array records, memory, recursion and
hash-collision bombs, opcodes that set state or call methods).  Every load must return or raise an Exception, never crash the process
nor hang; a returned object is used (its tensors summed and printed) since a bad array
can crash on first use.  A crash would kill pytest, so the cases run in a subprocess:
this file, run as a script, prints a JSON summary on its last line.

A refused file raises pickle.UnpicklingError, as torch's weights_only unpickler does for
globals it does not allow ("Weights only load failed"); these files are not PyTorch's
format, so torch itself is not run here.
"""
import io
import json
import os
import pickle
import pickletools
import random
import struct
import subprocess
import sys
import time
from collections import Counter

SEED = 14
MUTATIONS = 11_000   # random mutations, on top of the truncations

# ---- a small pickle assembler for the crafted files ------------------------------------------


class Op(bytes):
    """Pickle opcodes spliced as they are into ``value()`` (concatenations stay ``Op``)."""

    def __add__(self, other):
        return Op(bytes(self) + bytes(other))

    def __radd__(self, other):
        return Op(bytes(other) + bytes(self))


def value(v):
    """Opcodes pushing ``v`` (no memo, so fragments concatenate freely)."""
    if isinstance(v, Op):
        return bytes(v)
    if v is None:
        return b"N"
    if v is True or v is False:
        return b"\x88" if v else b"\x89"
    if type(v) is int:
        encoded = v.to_bytes(v.bit_length() // 8 + 1, "little", signed=True)
        return b"\x8a" + bytes([len(encoded)]) + encoded          # LONG1
    if type(v) is float:
        return b"G" + struct.pack(">d", v)                         # BINFLOAT
    if type(v) is str:
        data = v.encode("utf-8", "surrogatepass")
        return b"X" + struct.pack("<I", len(data)) + data          # BINUNICODE
    if type(v) is bytes:
        return b"B" + struct.pack("<I", len(v)) + v                # BINBYTES
    if type(v) is tuple:
        return b"(" + b"".join(value(x) for x in v) + b"t"         # MARK ... TUPLE
    if type(v) is list:
        return b"](" + b"".join(value(x) for x in v) + b"e"        # EMPTY_LIST MARK ... APPENDS
    if type(v) is dict:
        items = b"".join(value(k) + value(x) for k, x in v.items())
        return b"}(" + items + b"u"                                # EMPTY_DICT MARK ... SETITEMS
    raise TypeError(type(v))


def glob(module, name):
    return Op(b"c" + f"{module}\n{name}\n".encode())               # GLOBAL


def call(func, *args):
    return Op(func + value(tuple(args)) + b"R")                   # REDUCE


def program(*parts, protocol=4):
    return b"\x80" + bytes([protocol]) + b"".join(value(p) for p in parts) + b"."


def record(*fields, rebuild="_tensor_from_record"):
    return call(glob("tapejit.serialization", rebuild), *fields)


TENSOR = record("<f4", (2,), b"\x00" * 8, False)
DEEP = 100_000
DEEP_HASH = 1_000_000   # hashing a tuple this deep overflows the C stack (a crash)
COLLIDE = 2**61 - 1     # hash(k * COLLIDE) == 0 for every int k
COLLISIONS = 50_000     # as keys of one dict: half a minute to load
MARKER = "tapejit_load_fuzz_marker"
OPCODES = sorted({op.code.encode("latin-1")[0] for op in pickletools.opcodes})


def numpy_payloads():
    """The NumPy-global files the issue reports: NumPy's own pickle, which the old loader
    accepted.  An object-field dtype whose flags no longer say "pickle as a list" makes
    NumPy read raw bytes as object pointers: in load (a scalar) or on first use (an array)."""
    import numpy as np

    class Reduce:
        def __init__(self, *reduce):
            self.reduce = reduce

        def __reduce__(self):
            return self.reduce

    reconstruct = np.ndarray.__reduce__(np.zeros(1))[0]      # numpy(._core).multiarray._reconstruct
    scalar = np.float64(1).__reduce__()[0]                     # numpy(._core).multiarray.scalar
    object_field = Reduce(np.dtype, ("V8", False, True),
                          (3, "|", None, ("a",), {"a": (np.dtype("O"), 0)}, 8, 1, 0))
    object_dtype = Reduce(np.dtype, ("O8", False, True), (3, "|", None, None, None, -1, -1, 0))
    return {
        "numpy_object_field_array": pickle.dumps(Reduce(
            reconstruct, (np.ndarray, (0,), b"b"), (1, (1,), object_field, False, b"\x41" * 8)), 2),
        "numpy_object_scalar": pickle.dumps(Reduce(scalar, (object_dtype, b"\x41" * 8)), 2),
        "numpy_float_array": pickle.dumps(np.arange(3.0), 2),
    }


def crafted_cases():
    """name -> (file, the outcome expected: an exception's name or "returned")."""
    refused = "UnpicklingError"
    marker = os.path.join(os.environ.get("TMPDIR", "/tmp"), MARKER)
    deep_tuple = Op(b")" + b"\x85" * DEEP_HASH)                    # ((((),),),...)
    cases = {name: (data, refused) for name, data in numpy_payloads().items()}
    cases.update({
        # code execution
        "os_system": (program(call(glob("os", "system"), f"echo pwned > {marker}")), refused),
        "posix_system": (program(call(glob("posix", "system"), f"echo pwned > {marker}")), refused),
        "builtins_eval": (program(call(glob("builtins", "eval"), "1+1")), refused),
        "builtins_getattr": (program(call(glob("builtins", "getattr"), TENSOR, "__class__")), refused),
        "dotted_global": (program(call(glob("tapejit.serialization", "os.system"), "true")), refused),
        "dtype_module_attribute": (program(glob("tapejit.dtypes", "np")), refused),
        "dtype_class": (program(glob("tapejit.dtypes", "dtype")), refused),
        "tensor_class": (program(glob("tapejit.tensor", "Tensor")), refused),
        "old_format_rebuild": (program(call(glob("tapejit.tensor", "_rebuild"), None, False)), refused),
        # array records: every field comes from the file
        "record_object_dtype": (program(record("|O", (1,), b"\x41" * 8,
                                               rebuild="_ndarray_from_record")), refused),
        "record_datetime_dtype": (program(record("<M8[s]", (1,), b"\x00" * 8,
                                                 rebuild="_ndarray_from_record")), refused),
        "record_void_dtype": (program(record("|V8", (1,), b"\x00" * 8,
                                             rebuild="_ndarray_from_record")), refused),
        "record_big_endian": (program(record(">f4", (2,), b"\x00" * 8, False)), refused),
        "record_dtype_not_str": (program(record(4, (2,), b"\x00" * 8, False)), refused),
        "record_int32_requires_grad": (program(record("<i4", (2,), b"\x00" * 8, True)), refused),
        "record_huge_shape": (program(record("<f4", (10**12,), b"\x00" * 8, False)), refused),
        "record_huge_empty_shape": (program(record("<f8", (0, 2**62, 2**62), b"", False)), refused),
        "record_many_dims": (program(record("<f4", (1,) * 65, b"\x00" * 4, False)), refused),
        "record_negative_shape": (program(record("<f4", (-1,), b"", False)), refused),
        "record_negative_pair": (program(record("<f4", (-2, -1), b"\x00" * 8, False)), refused),
        "record_bool_shape": (program(record("<f4", (True,), b"\x00" * 4, False)), refused),
        "record_float_shape": (program(record("<f4", (2.0,), b"\x00" * 8, False)), refused),
        "record_list_shape": (program(record("<f4", [2], b"\x00" * 8, False)), refused),
        "record_short_data": (program(record("<f4", (3,), b"\x00" * 8, False)), refused),
        "record_long_data": (program(record("<f4", (1,), b"\x00" * 8, False)), refused),
        "record_str_data": (program(record("<f4", (2,), "\x00" * 8, False)), refused),
        "record_bytearray_data": (program(record("<f4", (2,), Op(b"\x96" + struct.pack("<Q", 8)
                                                                    + b"\x00" * 8), False)), refused),
        "record_bool_byte_2": (program(record("|b1", (2,), b"\x00\x02", False)), refused),
        "record_int_requires_grad": (program(record("<i8", (1,), b"\x00" * 8, True)), refused),
        "record_requires_grad_int": (program(record("<f4", (2,), b"\x00" * 8, 1)), refused),
        "record_parameter_float16": (program(record("<f2", (1,), b"\x00" * 2, True,   # no narrow grads
                                                    rebuild="_parameter_from_record")), refused),
        "record_uint16_tensor": (program(record("<u2", (1,), b"\x00" * 2, False)), refused),
        "record_too_few_arguments": (program(record("<f4", (2,))), "TypeError"),
        "record_numpy_dtype_object": (program(record("|O", rebuild="_numpy_dtype_from_record")), refused),
        "record_scalar_wrong_size": (program(record("<f8", b"\x00" * 4,
                                                    rebuild="_numpy_scalar_from_record")), refused),
        # memory bombs: lengths the file does not hold
        "binbytes8_huge": (b"\x80\x04\x8e" + struct.pack("<Q", 10**12) + b"\x00" * 16 + b".", refused),
        "binunicode8_huge": (b"\x80\x04\x8d" + struct.pack("<Q", 10**12) + b"a" * 16 + b".", refused),
        "frame_huge": (b"\x80\x04\x95" + struct.pack("<Q", 2**40) + b"N.", refused),
        "long4_huge": (b"\x80\x04\x8b" + struct.pack("<i", 2**31 - 1) + b"\x00" * 16 + b".", refused),
        "bytearray_of_size": (program(call(glob("builtins", "bytearray"), 10**12)), refused),
        "bytes_of_size": (program(call(glob("builtins", "bytes"), 10**12), protocol=2), refused),
        # recursion bombs: hashing a deep tuple recurses in C (a crash, not a RecursionError)
        "deep_tuple_in_set": (program(Op(b"\x8f(") + deep_tuple + Op(b"\x90")), refused),
        "deep_tuple_as_key": (program(Op(b"}") + deep_tuple + Op(b"Ns")), refused),
        "deep_mark_tuple": (program(Op(b"(" * DEEP + b")" + b"t" * DEEP)), refused),
        "deep_frozenset": (program(Op(b"(" * DEEP + b"\x91" * DEEP)), "returned"),
        # frozenset([(x,)]) by REDUCE, 10,000 deep: every callable and MARK first, then
        # per level TUPLE1 LIST TUPLE1 REDUCE.  (A frozenset's hash does not recurse.)
        "deep_frozenset_by_call": (program(Op(
            glob("builtins", "frozenset") + b"q\x00(" + b"h\x00(" * (DEEP // 10 - 1) + b")"
            + b"\x85l\x85R" * (DEEP // 10)), protocol=2), "returned"),
        "deep_list": (program(Op(b"]" * DEEP + b"a" * (DEEP - 1))), "returned"),
        "deep_dict": (program(Op(b"}" + b"N}" * DEEP + b"s" * DEEP)), "returned"),
        "deep_marks": (program(Op(b"(" * DEEP)), "IndexError"),
        "billion_laughs": (b"\x80\x04]q\x00" + b"".join(
            b"](" + b"h" + bytes([k]) + (b"h" + bytes([k])) * 9 + b"eq" + bytes([k + 1])
            for k in range(9)) + b".", "returned"),
        "self_referencing_list": (b"\x80\x04]q\x00h\x00a.", "returned"),
        "self_referencing_dict": (b"\x80\x04}q\x00Nh\x00s.", "returned"),
        # hash collisions: ints that differ by multiples of 2**61 - 1 hash alike, and n of
        # them take n**2 steps to insert (a million: hours)
        "colliding_dict_keys": (program(Op(b"}(" + b"".join(value(k * COLLIDE) + b"N"
                                                           for k in range(1, COLLISIONS)) + b"u")), refused),
        "colliding_dict_opcode": (program(Op(b"(" + b"".join(value(k * COLLIDE) + b"N"
                                                            for k in range(1, COLLISIONS)) + b"d")), refused),
        "colliding_set_items": (program(Op(b"\x8f(" + b"".join(value(k * COLLIDE)
                                                               for k in range(1, COLLISIONS)) + b"\x90")), refused),
        "colliding_frozenset": (program(Op(b"(" + b"".join(value(k * COLLIDE)
                                                          for k in range(1, COLLISIONS)) + b"\x91")), refused),
        "colliding_tuple_keys": (program(Op(b"}(" + b"".join(value((k * COLLIDE,)) + b"N"
                                                            for k in range(1, COLLISIONS)) + b"u")), refused),
        "colliding_set_call": (program(call(glob("builtins", "set"),
                                            [k * COLLIDE for k in range(1, COLLISIONS)]), protocol=2), refused),
        "colliding_memo_indices": (b"\x80\x02N" + b"".join(b"p%d\n" % (k * COLLIDE)
                                                        for k in range(1, COLLISIONS)) + b".", refused),
        # memo abuse
        "memo_get_missing": (b"\x80\x04h\x07.", refused),
        "memo_long_get_missing": (b"\x80\x04j" + struct.pack("<I", 2**32 - 1) + b".", refused),
        "memo_put_empty_stack": (b"\x80\x04q\x00N.", "IndexError"),
        "memo_long_put_huge": (b"\x80\x04Nr" + struct.pack("<I", 2**32 - 1) + b".", "returned"),
        "pop_mark_without_mark": (b"\x80\x04N1.", "IndexError"),
        "stop_on_empty_stack": (b"\x80\x04.", "IndexError"),
        "protocol_6": (b"\x80\x06N.", "ValueError"),
        # opcodes that set state or call methods on allowed objects
        "build_tensor_shape": (program(TENSOR + value((None, {"_shape": (10**6,), "_numel": 10**6}))
                                       + Op(b"b")), refused),
        "build_tensor_data": (program(TENSOR + value((None, {"_data": b"\x00"}))
                                      + Op(b"b")), refused),
        "build_dtype_itemsize": (program(glob("tapejit.dtypes", "float32")
                                         + value((None, {"itemsize": 1})) + Op(b"b")), refused),
        "build_ordered_dict_keys": (program(call(glob("collections", "OrderedDict"))
                                            + value({"keys": 1}) + Op(b"b")), refused),
        "build_size": (program(call(glob("tapejit.tensor", "Size"), (1, 2))
                               + value({"numel": 1}) + Op(b"b")), refused),
        "setitem_on_tensor": (program(TENSOR + value(0) + value(5.0) + Op(b"s")), refused),
        "setitems_on_tensor": (program(TENSOR + Op(b"(") + value(0) + value(5.0) + Op(b"u")), refused),
        "append_on_tensor": (program(TENSOR + value(1.0) + Op(b"a")), refused),
        "appends_on_size": (program(call(glob("tapejit.tensor", "Size"), (1,)) + Op(b"(Ne")), refused),
        "additems_on_tensor": (program(TENSOR + Op(b"(N\x90")), refused),
        "reduce_on_dtype": (program(call(glob("tapejit.dtypes", "float32"), 1)), refused),
        "reduce_on_tensor": (program(call(TENSOR, 1)), refused),
        "reduce_args_list": (program(Op(glob("builtins", "set") + b"](])eR")), refused),
        "newobj_ordered_dict": (program(Op(glob("collections", "OrderedDict") + b")\x81")), refused),
        "newobj_ex_size": (program(Op(glob("tapejit.tensor", "Size") + value(((1,),)) + b"}\x92")),
                           "returned"),
        "newobj_size_of_strings": (program(Op(glob("tapejit.tensor", "Size") + value((("a",),))
                                              + b"\x81")), refused),
        "newobj_size_of_list": (program(Op(glob("tapejit.tensor", "Size") + value(([1],)) + b"\x81")),
                                refused),
        "device_cuda": (program(Op(glob("tapejit.device", "device") + b")\x81")
                                + value((None, {"type": "cuda", "index": None})) + Op(b"b")), refused),
        "device_negative_index": (program(Op(glob("tapejit.device", "device") + b")\x81")
                                          + value((None, {"type": "cpu", "index": -1})) + Op(b"b")),
                                  refused),
        "device_extra_slot": (program(Op(glob("tapejit.device", "device") + b")\x81")
                                      + value((None, {"type": "cpu", "x": 1})) + Op(b"b")), refused),
        "device_with_arguments": (program(Op(glob("tapejit.device", "device") + value(("cuda",))
                                             + b"\x81")), refused),
        "inst_opcode": (b"\x80\x02(itapejit.tensor\nSize\n.", refused),
        "obj_opcode": (program(Op(b"(" + glob("tapejit.tensor", "Size") + b"o")), refused),
        "persistent_id": (b"\x80\x02P1\n.", refused),
        "binary_persistent_id": (b"\x80\x04NQ.", refused),
        "next_buffer": (b"\x80\x05\x97.", refused),
        "readonly_buffer": (program(value(b"ab") + Op(b"\x98")), refused),
        "extension_code": (b"\x80\x02\x82\x01.", "ValueError"),
        "stack_global_not_str": (program(value(1) + value(2) + Op(b"\x93")), refused),
        "codecs_zlib": (program(call(glob("_codecs", "encode"), "x" * 100, "zlib_codec")), refused),
        "codecs_rot13": (program(call(glob("_codecs", "encode"), "x", "rot13")), refused),
        "complex_from_string": (program(call(glob("builtins", "complex"), "1+2j")), refused),
        "complex_from_tensor": (program(call(glob("builtins", "complex"), TENSOR)), refused),
        "set_of_tensor": (program(call(glob("builtins", "set"), TENSOR)), refused),
        "counter_of_string": (program(call(glob("collections", "Counter"), "a" * 1000)), refused),
        "ordered_dict_with_items": (program(call(glob("collections", "OrderedDict"), [("a", 1)])),
                                    refused),
    })
    return cases


# ---- the valid files the mutations start from ------------------------------------------------


def valid_files():
    import numpy as np

    import tapejit as tj
    from collections import OrderedDict

    tj.manual_seed(0)
    model = tj.nn.Sequential(tj.nn.Linear(3, 2), tj.nn.Tanh(), tj.nn.Linear(2, 1))
    optimizer = tj.optim.Adam(model.parameters(), lr=0.01)
    model(tj.ones(4, 3)).sum().backward()
    optimizer.step()
    checkpoint = {
        "epoch": 3, "loss": 0.5, "name": "run", "raw": b"\x00\x01", "none": None,
        "pair": (tj.ones(2, dtype=tj.float64), [tj.arange(3), tj.tensor([True, False])]),
        "param": tj.nn.Parameter(tj.randn(2)), "scalar": tj.tensor(1.5), "empty": tj.zeros(0, 2),
        "array": np.arange(4, dtype=np.int16), "npscalar": np.float32(2.5), "npdtype": np.dtype("f8"),
        "ids": {1, 2}, "frozen": frozenset({"a"}), "complex": 1 + 2j, "bytearray": bytearray(b"xy"),
        "ordered": OrderedDict(a=1), "counter": Counter("aab"), "size": tj.Size([2, 3]),
        "device": tj.device("cpu"), "dtypes": [tj.float32, tj.int64, tj.bool],
    }
    small = {"w": tj.randn(2), "b": tj.tensor(0.5)}
    files = {}
    for protocol in (2, 4, 5):
        for name, obj in [("small", small), ("model", model.state_dict()),
                          ("optimizer", optimizer.state_dict()), ("checkpoint", checkpoint)]:
            buffer = io.BytesIO()
            tj.save(obj, buffer, pickle_protocol=protocol)
            files[f"{name}_p{protocol}"] = buffer.getvalue()
    return files


class Stream:
    """A file object that cannot seek (a pipe): the loader reads it in bounded chunks."""

    def __init__(self, data):
        self._file = io.BytesIO(data)
        self.read = self._file.read
        self.readline = self._file.readline

    def seekable(self):
        return False


def mutations(files, rng):
    """(kind, bytes): every truncation of the smallest file, then random mutations."""
    names = sorted(files)
    smallest = min(files.values(), key=len)
    for n in range(len(smallest)):
        yield "truncate", smallest[:n]
    for _ in range(MUTATIONS):
        data = bytearray(files[rng.choice(names)])
        kind = rng.choice(["bitflip", "bitflips", "insert", "delete", "overwrite", "opcode",
                           "splice", "duplicate"])
        if kind == "bitflip":
            i = rng.randrange(len(data))
            data[i] ^= 1 << rng.randrange(8)
        elif kind == "bitflips":
            for _ in range(rng.randint(2, 8)):
                i = rng.randrange(len(data))
                data[i] ^= 1 << rng.randrange(8)
        elif kind == "insert":
            i = rng.randrange(len(data) + 1)
            data[i:i] = bytes(rng.randrange(256) for _ in range(rng.randint(1, 4)))
        elif kind == "delete":
            i = rng.randrange(len(data))
            del data[i:i + rng.randint(1, 4)]
        elif kind == "overwrite":   # values that make lengths and counts extreme
            i = rng.randrange(len(data))
            data[i] = rng.choice([0x00, 0x01, 0x7F, 0x80, 0xFE, 0xFF])
        elif kind == "opcode":   # another opcode in place of a byte: reaches deeper than noise
            data[rng.randrange(len(data))] = rng.choice(OPCODES)
        elif kind == "splice":
            other = files[rng.choice(names)]
            data = data[:rng.randrange(len(data))] + other[rng.randrange(len(other)):]
        else:
            i, j = sorted(rng.randrange(len(data)) for _ in range(2))
            k = rng.randrange(len(data))
            data[k:k] = data[i:j]
        yield kind, bytes(data)


def use(obj, budget=2000):
    """Touch what a load returned: sum and print every tensor and array (a bad one crashes
    here), walking containers iteratively and each object once."""
    import numpy as np

    import tapejit as tj

    np.seterr(all="ignore")   # mutated floats may be NaN or overflow
    todo, seen = [obj], set()
    while todo and budget:
        x = todo.pop()
        if id(x) in seen:
            continue
        seen.add(id(x))
        budget -= 1
        if isinstance(x, tj.Tensor):
            x.detach().numpy().sum()
            if x.dtype.is_floating_point:
                (x.detach() * 2).sum().item()
            repr(x)
        elif isinstance(x, np.ndarray):
            repr(x)   # reads every element (object pointers, if it has any)
            x.sum()
        elif isinstance(x, (list, tuple, set, frozenset)):
            todo.extend(x)
        elif isinstance(x, dict):
            todo.extend(x.keys())
            todo.extend(x.values())
        elif isinstance(x, (np.generic, np.dtype, str, bytes, bytearray, int, float, complex)):
            repr(x)


def attempt(data, stream=False):
    """The outcome of loading ``data``: "returned" or the exception's class name."""
    import tapejit as tj

    try:
        obj = tj.load(Stream(data) if stream else io.BytesIO(data))
    except Exception as exc:   # noqa: BLE001 - any Exception is a clean refusal
        return type(exc).__name__, None
    try:
        use(obj)
    except Exception as exc:   # noqa: BLE001
        return "returned", type(exc).__name__
    return "returned", None


def main():
    import tapejit as tj

    verbose = "--verbose" in sys.argv
    rng = random.Random(SEED)
    files = valid_files()
    for name, data in files.items():   # the starting points load as they should
        assert attempt(data) == ("returned", None), name
    crafted, slowest_crafted = {}, 0.0
    for name, (data, _) in crafted_cases().items():
        if verbose:
            print("crafted", name, flush=True)
        start = time.perf_counter()
        crafted[name] = attempt(data)[0]
        slowest_crafted = max(slowest_crafted, time.perf_counter() - start)
        attempt(data, stream=True)   # read in chunks: a length may fail later, or not at all
    outcomes, use_errors, kinds = Counter(), Counter(), Counter()
    slowest = 0.0
    for index, (kind, data) in enumerate(mutations(files, rng)):
        if verbose:
            print("mutation", index, kind, data.hex(), flush=True)
        start = time.perf_counter()
        outcome, use_error = attempt(data, stream=index % 7 == 0)
        slowest = max(slowest, time.perf_counter() - start)
        outcomes[outcome] += 1
        kinds[kind] += 1
        if use_error:
            use_errors[use_error] += 1
    # No crafted file changed tapejit's global state.
    intact = (tj.float32.itemsize == 4 and tj.float64.itemsize == 8 and tj.int64.itemsize == 8
              and tj.ones(3).sum().item() == 3.0)
    print(json.dumps({
        "mutated": sum(kinds.values()), "kinds": kinds, "outcomes": outcomes,
        "use_errors": use_errors, "slowest_load_s": round(slowest, 4), "crafted": crafted,
        "slowest_crafted_s": round(slowest_crafted, 4),
        "globals_intact": intact,
        "marker_written": os.path.exists(os.path.join(os.environ.get("TMPDIR", "/tmp"), MARKER)),
    }))


def test_loader_survives_mutated_and_crafted_files(tmp_path):
    env = dict(os.environ, TMPDIR=str(tmp_path))
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [root, env.get("PYTHONPATH")]))
    done = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, cwd=root,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, (
        f"the fuzz process died (exit code {done.returncode}; a negative code is a signal: "
        f"-11 is a segmentation fault). Rerun `python tests/test_load_fuzz.py --verbose` to see "
        f"the last case.\n{done.stderr[-4000:]}")
    summary = json.loads(done.stdout.strip().splitlines()[-1])
    print(json.dumps({k: summary[k] for k in ("mutated", "kinds", "outcomes", "use_errors",
                                                 "slowest_load_s", "slowest_crafted_s")}, indent=1))
    assert summary["mutated"] >= 10_000
    assert summary["globals_intact"] and not summary["marker_written"]
    expected = {name: outcome for name, (_, outcome) in crafted_cases().items()}
    assert summary["crafted"] == expected
    assert summary["slowest_load_s"] < 5 and summary["slowest_crafted_s"] < 5


if __name__ == "__main__":
    main()
