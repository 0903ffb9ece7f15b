"""tapejit.utils.data: batches, dtypes and lengths against torch.utils.data (when
importable), shuffling with tapejit's generator, collation, random_split and errors."""
from collections import OrderedDict, namedtuple

import numpy as np
import pytest

import tapejit as tj
from tapejit.utils.data import (
    BatchSampler,
    DataLoader,
    Dataset,
    RandomSampler,
    SequentialSampler,
    Subset,
    TensorDataset,
    default_collate,
    random_split,
)


def assert_same(ours, theirs):
    """``ours`` (tapejit) has torch's structure, container types, dtypes, shapes and values."""
    torch = pytest.importorskip("torch")
    if isinstance(theirs, torch.Tensor):
        assert isinstance(ours, tj.Tensor)
        assert str(ours.dtype).split(".")[-1] == str(theirs.dtype).split(".")[-1]
        assert tuple(ours.shape) == tuple(theirs.shape)
        np.testing.assert_array_equal(ours.numpy(), theirs.numpy())
    elif isinstance(theirs, dict):
        assert type(ours) is type(theirs) and list(ours) == list(theirs)
        for key in theirs:
            assert_same(ours[key], theirs[key])
    elif isinstance(theirs, (list, tuple)):
        assert type(ours) is type(theirs) and len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert_same(a, b)
    else:
        assert ours == theirs


def both_datasets(n=10):
    torch = pytest.importorskip("torch")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((n, 3)).astype(np.float32)
    y = rng.integers(0, 4, n)
    return (TensorDataset(tj.tensor(x), tj.tensor(y)),
            torch.utils.data.TensorDataset(torch.tensor(x), torch.tensor(y)))


class Indices(Dataset):
    """Sample i is i."""

    def __init__(self, n):
        self.n = n

    def __getitem__(self, index):
        return index

    def __len__(self):
        return self.n


class Samples(Dataset):
    def __init__(self, samples):
        self.samples = samples

    def __getitem__(self, index):
        return self.samples[index]

    def __len__(self):
        return len(self.samples)


# ---- batches against torch -------------------------------------------------------------------

@pytest.mark.parametrize("batch_size, drop_last",
                         [(1, False), (3, False), (3, True), (4, True), (10, False), (32, False)])
def test_tensor_dataset_batches_match_torch(batch_size, drop_last):
    torch = pytest.importorskip("torch")
    ours, theirs = both_datasets(10)
    loader = DataLoader(ours, batch_size=batch_size, shuffle=False, drop_last=drop_last)
    reference = torch.utils.data.DataLoader(theirs, batch_size=batch_size, shuffle=False, drop_last=drop_last)
    batches = list(loader)
    assert len(loader) == len(reference) == len(batches)
    assert_same(batches, list(reference))


def test_batch_size_none_yields_converted_samples_as_torch():
    torch = pytest.importorskip("torch")
    samples = [(np.arange(3.0), 1, 2.5), (np.ones(3), 2, 0.5)]
    ours = list(DataLoader(Samples(samples), batch_size=None))
    theirs = list(torch.utils.data.DataLoader(samples, batch_size=None))
    assert_same(ours, theirs)
    assert len(DataLoader(Samples(samples), batch_size=None)) == 2


@pytest.mark.parametrize("samples", [
    [1.5, 2.0, -3.25],                                          # Python floats: float64
    [1, 2, 3],                                                  # ints: int64
    [True, False],                                              # bools: bool
    [np.float32(1.5), np.float32(2.0)],                         # NumPy scalars keep their dtype
    [np.float64(1.5), np.float64(2.0)],
    [np.arange(3.0), np.arange(3.0) * 2],                       # NumPy arrays
    [np.arange(3.0, dtype=np.float32), np.ones(3, np.float32)],
    ["a", "b"],                                                 # strings stay a list
    [(1, 2.0), (3, 4.0)],                                       # tuples collate to lists
    [[1, 2], [3, 4]],
    [{"x": 1.0, "y": [1, 2]}, {"x": 2.0, "y": [3, 4]}],         # dicts field by field
    [OrderedDict(a=np.zeros(2), b=3), OrderedDict(a=np.ones(2), b=4)],
    [{"img": np.zeros((2, 2)), "meta": ("a", 1)}, {"img": np.ones((2, 2)), "meta": ("b", 2)}],
])
def test_default_collate_matches_torch(samples):
    torch = pytest.importorskip("torch")
    assert_same(default_collate(samples), torch.utils.data.default_collate(samples))


def test_default_collate_stacks_tensors_and_keeps_namedtuples():
    Point = namedtuple("Point", "x y")
    batch = default_collate([Point(tj.tensor([1.0, 2.0]), 1), Point(tj.tensor([3.0, 4.0]), 2)])
    assert isinstance(batch, Point)
    assert batch.x.shape == (2, 2) and batch.x.dtype is tj.float32
    np.testing.assert_array_equal(batch.x.numpy(), [[1, 2], [3, 4]])
    assert batch.y.dtype is tj.int64 and batch.y.tolist() == [1, 2]


def test_collate_fn_receives_the_list_of_samples():
    seen = []
    loader = DataLoader(Indices(5), batch_size=2, collate_fn=lambda batch: seen.append(batch) or len(batch))
    assert list(loader) == [2, 2, 1]
    assert seen == [[0, 1], [2, 3], [4]]


def test_num_workers_loads_in_process():
    loader = DataLoader(Indices(5), batch_size=2, num_workers=2, pin_memory=True, persistent_workers=True)
    assert [b.tolist() for b in loader] == [[0, 1], [2, 3], [4]]


# ---- lengths and samplers --------------------------------------------------------------------

@pytest.mark.parametrize("n, batch_size, drop_last",
                         [(10, 3, False), (10, 3, True), (9, 3, True), (2, 5, True), (2, 5, False)])
def test_len(n, batch_size, drop_last):
    loader = DataLoader(Indices(n), batch_size=batch_size, drop_last=drop_last)
    expected = n // batch_size if drop_last else -(-n // batch_size)
    assert len(loader) == expected == len(list(loader))
    assert all(len(b) == batch_size for b in loader) or not drop_last


def test_batch_sampler_and_sampler_arguments():
    loader = DataLoader(Indices(6), batch_sampler=BatchSampler(SequentialSampler(range(6)), 4, False))
    assert [b.tolist() for b in loader] == [[0, 1, 2, 3], [4, 5]]
    assert len(loader) == 2
    loader = DataLoader(Indices(4), batch_size=2, sampler=[3, 2, 1, 0])
    assert [b.tolist() for b in loader] == [[3, 2], [1, 0]]


def test_dataset_getitems_is_used_for_batches():
    class Batched(Indices):
        def __getitems__(self, indices):
            return [10 * i for i in indices]
    assert [b.tolist() for b in DataLoader(Batched(3), batch_size=2)] == [[0, 10], [20]]


# ---- shuffling -------------------------------------------------------------------------------

def epoch(loader):
    return [i for batch in loader for i in batch.tolist()]


def test_shuffle_is_a_permutation_reproducible_with_manual_seed():
    loader = DataLoader(Indices(50), batch_size=8, shuffle=True)
    tj.manual_seed(3)
    first, second = epoch(loader), epoch(loader)
    assert sorted(first) == sorted(second) == list(range(50))
    assert first != list(range(50)) and first != second   # a fresh order per epoch
    tj.manual_seed(3)
    assert epoch(loader) == first and epoch(loader) == second


def test_random_sampler_with_replacement_and_num_samples():
    tj.manual_seed(0)
    drawn = list(RandomSampler(Indices(4), replacement=True, num_samples=20))
    assert len(drawn) == 20 and set(drawn) <= set(range(4))
    longer = list(RandomSampler(Indices(4), num_samples=10))
    assert sorted(longer[:4]) == sorted(longer[4:8]) == [0, 1, 2, 3] and len(longer) == 10


# ---- random_split and Subset -----------------------------------------------------------------

@pytest.mark.parametrize("lengths", [[7, 3], [0.7, 0.3], [0.5, 0.5], [0.34, 0.33, 0.33], [1 / 3] * 3, [11]])
def test_random_split_sizes_match_torch_and_are_disjoint(lengths):
    torch = pytest.importorskip("torch")
    n = 10 if isinstance(lengths[0], int) and sum(lengths) == 10 else 11
    parts = random_split(Indices(n), lengths)
    reference = torch.utils.data.random_split(range(n), lengths)
    assert [len(p) for p in parts] == [len(r) for r in reference]
    chosen = [i for p in parts for i in p.indices]
    assert sorted(chosen) == list(range(n))   # disjoint, and together the whole dataset
    assert [list(p) for p in parts] == [p.indices for p in parts]


def test_random_split_is_reproducible_and_warns_on_empty_split():
    tj.manual_seed(1)
    first = [p.indices for p in random_split(Indices(10), [0.5, 0.5])]
    tj.manual_seed(1)
    assert [p.indices for p in random_split(Indices(10), [0.5, 0.5])] == first
    with pytest.warns(UserWarning) as caught:
        random_split(Indices(2), [0.9, 0.05, 0.05])
    assert [str(w.message) for w in caught] == [
        f"Length of split at index {i} is 0. This might result in an empty dataset." for i in (1, 2)]


def test_subset_indexing_and_loader():
    subset = Subset(Indices(10), [9, 2, 5])
    assert len(subset) == 3 and subset[0] == 9 and subset[[1, 2]] == [2, 5]
    assert [b.tolist() for b in DataLoader(subset, batch_size=2)] == [[9, 2], [5]]


# ---- errors ----------------------------------------------------------------------------------

def test_errors():
    with pytest.raises(AssertionError, match="Size mismatch between tensors"):
        TensorDataset(tj.zeros(3, 2), tj.zeros(4))
    with pytest.raises(ValueError, match="sampler option is mutually exclusive with shuffle"):
        DataLoader(Indices(3), sampler=[0, 1, 2], shuffle=True)
    with pytest.raises(ValueError, match="batch_sampler option is mutually exclusive"):
        DataLoader(Indices(3), batch_size=2, batch_sampler=[[0, 1]])
    with pytest.raises(ValueError, match="batch_size=None option disables auto-batching"):
        DataLoader(Indices(3), batch_size=None, drop_last=True)
    with pytest.raises(ValueError, match="batch_size should be a positive integer value"):
        DataLoader(Indices(3), batch_size=0)
    with pytest.raises(ValueError, match="num_workers option should be non-negative"):
        DataLoader(Indices(3), num_workers=-1)
    with pytest.raises(NotImplementedError, match="tapejit.manual_seed"):
        DataLoader(Indices(3), shuffle=True, generator=object())
    with pytest.raises(NotImplementedError, match="generator"):
        random_split(Indices(3), [1, 2], generator=object())
    with pytest.raises(ValueError, match="Sum of input lengths does not equal"):
        random_split(Indices(3), [1, 1])
    with pytest.raises(ValueError, match="Fraction at index 1 is not between 0 and 1"):
        random_split(Indices(3), [0.5, 1.5, -1.0])
    with pytest.raises(ValueError, match="num_samples should be a positive integer value"):
        DataLoader(Indices(0), shuffle=True)
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors"):
        default_collate([object(), object()])
    with pytest.raises(TypeError, match="default_collate: batch must contain tensors"):
        default_collate([np.array(["a"]), np.array(["b"])])
    with pytest.raises(RuntimeError, match="each element in list of batch should be of equal size"):
        default_collate([[1, 2], [3]])
    with pytest.raises(NotImplementedError, match="Subclasses of Dataset should implement __getitem__"):
        Dataset()[0]


def test_registered_under_tapejit():
    assert tj.utils.data.DataLoader is DataLoader
    assert tj.utils.data.TensorDataset is TensorDataset
