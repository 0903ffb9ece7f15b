"""tapejit.save / tapejit.load: round trips through paths and file objects, the
weights_only restrictions, refusal of PyTorch's files, a trained model restored, and the
record format (arrays as dtype, shape and bytes, checked on load).  test_load_fuzz.py
runs the loader on mutated and hostile files in a subprocess."""
import importlib
import io
import os
import pickle
import pickletools
import struct
import zipfile
from collections import OrderedDict

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import tapejit as tj
from tapejit import serialization


def round_trip(obj, **load_args):
    buffer = io.BytesIO()
    tj.save(obj, buffer)
    buffer.seek(0)
    return tj.load(buffer, **load_args)


def assert_tensor_equal(a, b):
    assert type(a) is type(b) and a.dtype is b.dtype and a.requires_grad == b.requires_grad
    np.testing.assert_array_equal(a.detach().numpy(), b.detach().numpy())


@pytest.mark.parametrize("make", [
    lambda: tj.randn(3, 4),
    lambda: tj.randn(2, dtype=tj.float64, requires_grad=True),
    lambda: tj.arange(5),
    lambda: tj.tensor(2.5),
    lambda: tj.tensor([True, False]),
    lambda: tj.nn.Parameter(tj.randn(2, 2)),
])
def test_tensor_round_trip_through_a_path(make, tmp_path):
    tensor = make()
    path = tmp_path / "tensor.pt"
    tj.save(tensor, path)
    assert_tensor_equal(tj.load(path), tensor)
    assert_tensor_equal(tj.load(str(path)), tensor)


def test_a_computed_tensor_saves_its_value():
    x = tj.randn(3, requires_grad=True)
    y = x * 2 + 1
    loaded = round_trip(y)
    np.testing.assert_array_equal(loaded.numpy(force=True), y.detach().numpy())


def test_state_dict_round_trip_through_a_file_object(tmp_path):
    model = tj.nn.Sequential(tj.nn.Linear(3, 4), tj.nn.ReLU(), tj.nn.Linear(4, 1))
    path = tmp_path / "model.pt"
    with open(path, "wb") as f:
        tj.save(model.state_dict(), f)
    with open(path, "rb") as f:
        loaded = tj.load(f)
    assert type(loaded) is OrderedDict and list(loaded) == list(model.state_dict())
    for key, value in model.state_dict().items():
        assert_tensor_equal(loaded[key], value)
    # torch's state_dict carries per-module versions in an attribute, pickled with BUILD
    assert loaded._metadata == model.state_dict()._metadata


def test_an_ordered_dict_takes_no_state_but_a_state_dicts_metadata():
    shadow = OrderedDict(a=1)
    shadow.__dict__["keys"] = "not a method"   # BUILD would shadow the dict's methods
    with pytest.raises(pickle.UnpicklingError, match="OrderedDict's state may hold only"):
        load_bytes(pickle.dumps(shadow, 4))


def test_optimizer_state_dict_round_trip():
    def make():
        tj.manual_seed(0)
        model = tj.nn.Linear(3, 2)
        return model, tj.optim.Adam(model.parameters(), lr=0.1, betas=(0.8, 0.9))

    def step(model, optimizer):
        optimizer.zero_grad()
        model(tj.ones(4, 3)).pow(2).sum().backward()
        optimizer.step()

    model, optimizer = make()
    for _ in range(3):
        step(model, optimizer)
    saved = round_trip({"model": model.state_dict(), "optimizer": optimizer.state_dict()})
    assert saved["optimizer"]["param_groups"] == optimizer.state_dict()["param_groups"]
    restored, restored_optimizer = make()
    restored.load_state_dict(saved["model"])
    restored_optimizer.load_state_dict(saved["optimizer"])
    step(model, optimizer)
    step(restored, restored_optimizer)
    for p, q in zip(model.parameters(), restored.parameters()):
        np.testing.assert_array_equal(p.detach().numpy(), q.detach().numpy())


def test_nested_containers_and_plain_values():
    checkpoint = {
        "epoch": 7, "loss": 0.25, "name": "run", "done": False, "none": None, "raw": b"\x00\x01",
        "history": [1.0, 2.0], "pair": (tj.ones(2), {"inner": [tj.zeros(1, dtype=tj.int64)]}),
        "ids": {1, 2}, "array": np.arange(4.0), "scalar": np.float32(1.5),
        "dtype": tj.float64, "dtypes": [tj.float32, tj.int64, tj.bool],
        "shape": tj.ones(2, 3).shape, "device": tj.device("cpu"),
    }
    loaded = round_trip(checkpoint)
    assert list(loaded) == list(checkpoint)
    plain = ["epoch", "loss", "name", "done", "none", "raw", "history", "ids", "scalar", "dtype",
             "dtypes", "shape", "device"]
    for key in plain:
        assert loaded[key] == checkpoint[key] and type(loaded[key]) is type(checkpoint[key])
    assert isinstance(loaded["pair"], tuple)
    assert_tensor_equal(loaded["pair"][0], checkpoint["pair"][0])
    assert_tensor_equal(loaded["pair"][1]["inner"][0], checkpoint["pair"][1]["inner"][0])
    np.testing.assert_array_equal(loaded["array"], checkpoint["array"])


def test_pickle_protocol_2_round_trip():
    buffer = io.BytesIO()
    tj.save({"t": tj.randn(3), "raw": b"abc"}, buffer, pickle_protocol=2)
    buffer.seek(0)
    loaded = tj.load(buffer)
    assert loaded["raw"] == b"abc" and loaded["t"].shape == (3,)


class Custom:
    def __init__(self, value):
        self.value = value


class Exploit:
    def __reduce__(self):
        return (os.system, ("echo should-not-run",))


def test_weights_only_refuses_arbitrary_objects():
    with pytest.raises(pickle.UnpicklingError, match=r"test_serialization\.Custom.*weights_only=False"):
        round_trip({"obj": Custom(3)})
    with pytest.raises(pickle.UnpicklingError, match="posix.system|nt.system"):
        round_trip(Exploit())
    with pytest.raises(pickle.UnpicklingError, match="Sequential"):
        round_trip(tj.nn.Sequential(tj.nn.Linear(2, 2)))
    assert round_trip({"obj": Custom(3)}, weights_only=False)["obj"].value == 3


def test_add_safe_globals(monkeypatch):
    monkeypatch.setattr(serialization, "_user_safe_globals", {})
    serialization.add_safe_globals([Custom])
    assert serialization.get_safe_globals() == [Custom]
    assert round_trip(Custom(5)).value == 5


def test_a_whole_model_loads_with_weights_only_false():
    model = tj.nn.Sequential(tj.nn.Linear(3, 2), tj.nn.Tanh())
    loaded = round_trip(model, weights_only=False)
    x = tj.randn(4, 3)
    np.testing.assert_array_equal(loaded(x).detach().numpy(), model(x).detach().numpy())


def test_an_explicit_pickle_module_loads_without_weights_only():
    buffer = io.BytesIO()
    tj.save([1, 2], buffer)
    buffer.seek(0)
    with pytest.raises(RuntimeError, match="explicit pickle_module"):
        tj.load(buffer, pickle_module=pickle, weights_only=True)
    assert tj.load(buffer, pickle_module=pickle) == [1, 2]   # as torch: weights_only defaults to False


def test_pytorch_zip_files_are_refused(tmp_path):
    path = tmp_path / "zip.pt"
    with zipfile.ZipFile(path, "w") as archive:
        archive.writestr("archive/data.pkl", b"")
    with pytest.raises(RuntimeError, match="PyTorch checkpoint.*tapejit.save"):
        tj.load(path)


def test_files_written_by_torch_are_refused(tmp_path):
    torch = pytest.importorskip("torch")
    path = tmp_path / "torch.pt"
    torch.save({"w": torch.ones(2)}, path)
    with pytest.raises(RuntimeError, match="is a PyTorch checkpoint"):
        tj.load(path)
    with open(path, "rb") as f, pytest.raises(RuntimeError, match="is a PyTorch checkpoint"):
        tj.load(f, weights_only=False)
    legacy = io.BytesIO()
    torch.save(torch.ones(2), legacy, _use_new_zipfile_serialization=False)
    legacy.seek(0)
    with pytest.raises(RuntimeError, match="is a PyTorch checkpoint"):
        tj.load(legacy)


def test_trained_model_saved_and_loaded_gives_identical_outputs(tmp_path):
    def make():
        return tj.nn.Sequential(tj.nn.Linear(4, 8), tj.nn.ReLU(), tj.nn.Linear(8, 1))

    tj.manual_seed(0)
    model = make()
    optimizer = tj.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)
    x, y = tj.randn(32, 4), tj.randn(32, 1)
    for _ in range(20):
        optimizer.zero_grad()
        tj.nn.functional.mse_loss(model(x), y).backward()
        optimizer.step()
    path = tmp_path / "trained.pt"
    tj.save(model.state_dict(), path)

    tj.manual_seed(1)
    fresh = make()
    assert not np.array_equal(fresh(x).detach().numpy(), model(x).detach().numpy())
    fresh.load_state_dict(tj.load(path))
    np.testing.assert_array_equal(fresh(x).detach().numpy(), model(x).detach().numpy())


# ---- the record format: arrays never go through NumPy's pickle ------------------------------


def saved_bytes(obj, protocol=pickle.DEFAULT_PROTOCOL):
    buffer = io.BytesIO()
    tj.save(obj, buffer, pickle_protocol=protocol)
    return buffer.getvalue()


def pickled_names(data):
    """Every string a pickle holds (module and attribute names included)."""
    return {arg for _, arg, _ in pickletools.genops(data) if isinstance(arg, str)}


@pytest.mark.parametrize("protocol", [2, 3, 4, 5])
def test_saved_files_hold_no_numpy_pickle(protocol):
    checkpoint = {
        "tensor": tj.randn(2, 3), "param": tj.nn.Parameter(tj.randn(2)), "int": tj.arange(3),
        "array": np.arange(6.0).reshape(2, 3)[:, ::2], "scalar": np.int16(-3),
        "np_bool": np.bool_(True), "dtype": np.dtype("f4"),
    }
    names = " ".join(pickled_names(saved_bytes(checkpoint, protocol))).split()
    assert not [name for name in names if name.startswith("numpy")]
    assert "_tensor_from_record" in names and "_ndarray_from_record" in names


NUMERIC_DTYPES = [np.bool_, np.int8, np.int16, np.int32, np.int64, np.uint8, np.uint16,
                  np.uint32, np.uint64, np.float16, np.float32, np.float64, np.complex64,
                  np.complex128]


@pytest.mark.parametrize("dtype", NUMERIC_DTYPES, ids=lambda d: np.dtype(d).name)
@pytest.mark.parametrize("byte_order", ["<", ">"])
def test_numpy_arrays_of_every_numeric_dtype_round_trip(dtype, byte_order):
    rng = np.random.default_rng(0)
    values = (rng.integers(0, 2, (3, 4)) if dtype is np.bool_ else rng.integers(-100, 100, (3, 4)))
    base = values.astype(dtype)
    arrays = [base, base[:, ::2], base.T, base[0, 0, ...], base[:0],
              base.astype(np.dtype(dtype).newbyteorder(byte_order))]
    loaded = round_trip({"arrays": arrays, "scalar": base[0, 1].astype(dtype)[()]})
    for saved, back in zip(arrays, loaded["arrays"]):
        assert type(back) is np.ndarray and back.shape == saved.shape
        assert back.dtype == np.dtype(dtype) and back.dtype.isnative   # values kept, native order
        assert back.flags.writeable and back.flags.owndata and back.flags.c_contiguous
        np.testing.assert_array_equal(back, saved)
    assert type(loaded["scalar"]) is np.dtype(dtype).type and loaded["scalar"] == base[0, 1]


def test_numpy_dtypes_round_trip():
    saved = [np.dtype(d) for d in NUMERIC_DTYPES]
    assert round_trip(saved) == saved


def test_numpy_objects_without_a_record_need_weights_only_false():
    """An array of strings or dates falls back to NumPy's pickle, which only
    weights_only=False reads (torch >= 2.6 also refuses NumPy's globals by default)."""
    checkpoint = {"names": np.array(["a", "bc"]), "when": np.datetime64("2024-01-01")}
    with pytest.raises(pickle.UnpicklingError, match=r"NumPy's own pickle.*non-numeric.*weights_only=False"):
        round_trip(checkpoint)
    loaded = round_trip(checkpoint, weights_only=False)
    np.testing.assert_array_equal(loaded["names"], checkpoint["names"])
    assert loaded["when"] == checkpoint["when"]


class _OldFormatPickler(pickle.Pickler):
    """How tapejit.save wrote tensors before records: the value in NumPy's pickle."""

    def reducer_override(self, obj):
        if isinstance(obj, tj.nn.Parameter):
            rebuild = importlib.import_module("tapejit.nn.parameter")._rebuild_parameter
        elif isinstance(obj, tj.Tensor):
            rebuild = importlib.import_module("tapejit.tensor")._rebuild
        else:
            return NotImplemented
        return rebuild, (np.array(obj.detach().numpy()), obj.requires_grad)


def test_files_in_the_old_format_load_only_with_weights_only_false():
    model = tj.nn.Linear(3, 2)
    old = io.BytesIO()
    _OldFormatPickler(old, protocol=4).dump({"model": model.state_dict(), "param": model.bias})
    old.seek(0)
    with pytest.raises(pickle.UnpicklingError,
                       match=r"tapejit\.tensor\._rebuild.*older tapejit.*weights_only=False.*save it again"):
        tj.load(old)
    old.seek(0)
    loaded = tj.load(old, weights_only=False)
    for key, value in model.state_dict().items():
        assert_tensor_equal(loaded["model"][key], value)
    assert_tensor_equal(loaded["param"], model.bias)
    resaved = round_trip(loaded)   # saving it again writes records
    assert_tensor_equal(resaved["model"]["weight"], model.state_dict()["weight"])
    assert_tensor_equal(resaved["param"], model.bias)


def test_a_parameter_keeps_its_type_and_requires_grad_but_not_its_grad():
    """As torch.save: .grad is not saved."""
    param = tj.nn.Parameter(tj.randn(3))
    param.sum().backward()
    frozen = tj.nn.Parameter(tj.randn(2), requires_grad=False)
    loaded_param, loaded_frozen = round_trip([param, frozen])
    assert_tensor_equal(loaded_param, param)
    assert_tensor_equal(loaded_frozen, frozen)
    assert loaded_param.grad is None and loaded_param.is_leaf


class _Call:
    """Pickles as ``func(*args)``: how a crafted file calls an allowed function."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def load_bytes(data, **load_args):
    return tj.load(io.BytesIO(data), **load_args)


@pytest.mark.parametrize("args, message", [
    (("|O", (1,), b"\x00" * 8, False), r"dtype '\|O'"),
    (("<u4", (2,), b"\x00" * 8, False), r"dtype '<u4'"),            # not a tapejit dtype
    ((">f4", (2,), b"\x00" * 8, False), r"dtype '>f4'"),
    (("<f4", (10**12,), b"\x00" * 8, False), r"needs 4000000000000 bytes of data, got 8"),
    (("<f8", (0, 2**62, 2**62), b"", False), "too large"),
    (("<f4", (-2, -1), b"\x00" * 8, False), "non-negative ints"),
    (("<f4", (2.0,), b"\x00" * 8, False), "non-negative ints"),
    (("<f4", [2], b"\x00" * 8, False), "tuple of at most 64 ints"),
    (("<f4", (1,) * 65, b"\x00" * 4, False), "tuple of at most 64 ints"),
    (("<f4", (2,), bytearray(8), False), "must be bytes, got bytearray"),
    (("|b1", (2,), b"\x00\x02", False), "other than 0 and 1"),
    (("<i8", (1,), b"\x00" * 8, True), "only floating point tensors"),
    (("<f4", (2,), b"\x00" * 8, 1), "requires_grad must be a bool"),
])
def test_array_records_are_checked_before_anything_is_allocated(args, message):
    data = pickle.dumps(_Call(serialization._tensor_from_record, *args), protocol=4)
    with pytest.raises(pickle.UnpicklingError, match=message):
        load_bytes(data)


class _SpyFile(io.BytesIO):
    def __init__(self, data, seekable=True):
        super().__init__(data)
        self.sizes = []
        self._seekable = seekable

    def read(self, n=-1):
        self.sizes.append(n)
        return super().read(n)

    def seekable(self):
        return self._seekable


@pytest.mark.parametrize("seekable", [True, False])
def test_a_length_larger_than_the_file_is_never_read(seekable):
    """A crafted length (bytes of 10**12 bytes) must not make the loader ask the file
    for 10**12 bytes: a file object allocates what it is asked for."""
    data = b"\x80\x04\x8e" + struct.pack("<Q", 10**12) + b"\x00" * 64 + b"."
    spy = _SpyFile(data, seekable)
    with pytest.raises((pickle.UnpicklingError, EOFError)):
        tj.load(spy)
    assert max(spy.sizes) <= (len(data) if seekable else 1 << 20)


def test_opcodes_cannot_set_the_state_of_tensors_or_dtypes():
    """BUILD would set a tensor's slots (a shape its data does not have: the kernels then
    read past the data) or a dtype's (every float32 tensor of the process)."""
    tensor = pickle.dumps(_Call(serialization._tensor_from_record, "<f4", (2,), b"\x00" * 8, False), 4)
    build_shape = tensor[:-1] + pickle.dumps((None, {"_shape": (10**6,)}), 4)[2:-1] + b"b."
    with pytest.raises(pickle.UnpicklingError, match=r"sets the state of a Tensor \(BUILD\)"):
        load_bytes(build_shape)
    build_dtype = b"\x80\x04ctapejit.dtypes\nfloat32\n" + pickle.dumps((None, {"itemsize": 1}), 4)[2:-1] + b"b."
    with pytest.raises(pickle.UnpicklingError, match=r"sets the state of a dtype"):
        load_bytes(build_dtype)
    assert tj.float32.itemsize == 4
    setitem = tensor[:-1] + b"K\x00G@\x14\x00\x00\x00\x00\x00\x00s."   # tensor[0] = 5.0
    with pytest.raises(pickle.UnpicklingError, match=r"applies SETITEM to a Tensor"):
        load_bytes(setitem)


def test_allowed_builtins_refuse_arguments_that_allocate_or_run_codecs():
    bytearray_of_size = pickle.dumps(_Call(bytearray, 10**12), 4)
    with pytest.raises(pickle.UnpicklingError, match="bytearray"):
        load_bytes(bytearray_of_size)
    import codecs
    with pytest.raises(pickle.UnpicklingError, match="latin1"):
        load_bytes(pickle.dumps(_Call(codecs.encode, "abc", "rot13"), 4))


def test_tuples_nested_too_deep_to_hash_are_refused():
    """Hashing a tuple recurses in C without a depth check: as a set item, a tuple nested
    a million deep crashes the process (tapejit.load's fuzz test runs that file)."""
    deep = b"\x80\x04\x8f(" + b")" + b"\x85" * 200 + b"\x90."
    with pytest.raises(pickle.UnpicklingError, match="nests tuples more than 100 deep"):
        load_bytes(deep)
    nested = ()
    for _ in range(50):
        nested = (nested,)
    assert round_trip({nested}) == {nested}


def test_successive_objects_load_from_one_file_object():
    buffer = io.BytesIO()
    tj.save(tj.ones(2), buffer)
    tj.save({"b": np.arange(2)}, buffer)
    buffer.seek(0)
    assert_tensor_equal(tj.load(buffer), tj.ones(2))
    np.testing.assert_array_equal(tj.load(buffer)["b"], np.arange(2))


def test_a_stream_that_cannot_seek_loads():
    data = saved_bytes({"w": tj.randn(300, 300), "b": np.ones(3)})
    loaded = tj.load(_SpyFile(data, seekable=False))
    assert loaded["w"].shape == (300, 300) and loaded["b"].shape == (3,)


_TENSOR_DTYPES = [tj.float32, tj.float64, tj.int64, tj.bool]


@st.composite
def tensors(draw):
    dtype = draw(st.sampled_from(_TENSOR_DTYPES))
    shape = tuple(draw(st.lists(st.integers(0, 3), max_size=3)))
    values = np.random.default_rng(draw(st.integers(0, 2**32 - 1))).normal(size=shape) * 10
    tensor = tj.tensor(values.astype(dtype.np))
    if dtype.is_floating_point and draw(st.booleans()):
        tensor.requires_grad_()
    return tensor


_leaves = st.one_of(
    tensors(), st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
    st.text(max_size=5), st.binary(max_size=5),
    st.builds(lambda d, n: np.arange(n).astype(d), st.sampled_from(NUMERIC_DTYPES), st.integers(0, 4)),
)
_objects = st.recursive(_leaves, lambda children: st.one_of(
    st.lists(children, max_size=3), st.tuples(children, children),
    st.dictionaries(st.text(max_size=3), children, max_size=3)), max_leaves=8)


def assert_same(a, b):
    assert type(a) is type(b)
    if isinstance(a, tj.Tensor):
        assert_tensor_equal(a, b)
    elif isinstance(a, np.ndarray):
        assert a.dtype == b.dtype
        np.testing.assert_array_equal(a, b)
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            assert_same(x, y)
    elif isinstance(a, dict):
        assert list(a) == list(b)
        for key in a:
            assert_same(a[key], b[key])
    else:
        assert a == b


@settings(max_examples=60, deadline=None)
@given(obj=_objects, protocol=st.integers(2, 5))
def test_any_nest_of_tensors_arrays_and_values_round_trips(obj, protocol):
    buffer = io.BytesIO(saved_bytes(obj, protocol))
    assert_same(tj.load(buffer), obj)


def test_a_gzip_file_object_loads(tmp_path):
    """gzip files seek, but not from the end: the loader then reads long records in chunks."""
    import gzip
    path = tmp_path / "checkpoint.pt.gz"
    with gzip.open(path, "wb") as f:
        tj.save({"w": tj.randn(600, 600)}, f)
    with gzip.open(path, "rb") as f:
        assert tj.load(f)["w"].shape == (600, 600)


def test_many_unequal_keys_of_one_hash_are_refused():
    """n keys of one hash take n**2 steps to insert: a file of a million ints that differ by
    multiples of 2**61 - 1 (all hash to 0) would load for hours."""
    colliding = {k * (2**61 - 1): None for k in range(1, 2000)}
    with pytest.raises(pickle.UnpicklingError, match="more than 32 unequal keys of one hash"):
        load_bytes(pickle.dumps(colliding, 4))
    # Equal keys repeated, and the few unequal ones that hash alike (hash(-1) == hash(-2)), load.
    legit = [{-1: k, -2: k, 0: k} for k in range(1000)]
    assert round_trip(legit) == legit


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_a_device_pickles_and_loads_weights_only_in_every_protocol(protocol):
    # a device with slots only needed protocol 2 (it failed under 0 and 1)
    for d in (tj.device("cpu"), tj.device("cpu", 1), tj.device("cpu:0")):
        again = pickle.loads(pickle.dumps(d, protocol=protocol))
        assert type(again) is tj.device and (again.type, again.index) == (d.type, d.index)
        buffer = io.BytesIO()
        tj.save({"device": d}, buffer, pickle_protocol=protocol)
        buffer.seek(0)
        loaded = tj.load(buffer, weights_only=True)["device"]
        assert type(loaded) is tj.device and repr(loaded) == repr(d)


def test_a_device_written_as_newobj_and_build_still_loads_weights_only():
    # the form files written before devices had __reduce__ hold: NEWOBJ(device, ()) + BUILD
    old = (b"\x80\x02ctapejit.device\ndevice\n)\x81N}(X\x04\x00\x00\x00typeX\x03\x00\x00\x00cpu"
           b"X\x05\x00\x00\x00indexK\x03u\x86b.")
    assert repr(serialization._WeightsOnlyUnpickler(io.BytesIO(old)).load()) == "device(type='cpu', index=3)"


@pytest.mark.parametrize("args", [b"X\x04\x00\x00\x00cudaN", b"X\x03\x00\x00\x00cpuJ\xff\xff\xff\xff",
                                  b"X\x03\x00\x00\x00cpuX\x01\x00\x00\x001", b"X\x03\x00\x00\x00cpu",
                                  b"X\x03\x00\x00\x00cpuNN"])
def test_a_device_reduce_takes_only_the_cpu_and_an_index(args):
    crafted = b"ctapejit.device\ndevice\n(" + args + b"tR."
    with pytest.raises(pickle.UnpicklingError, match="a device is allowed only as device"):
        serialization._WeightsOnlyUnpickler(io.BytesIO(crafted)).load()
