"""tapejit.save / tapejit.load: round trips through paths and file objects, the
weights_only restrictions, refusal of PyTorch's files, and a trained model restored."""
import io
import os
import pickle
import zipfile
from collections import OrderedDict

import numpy as np
import pytest

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
