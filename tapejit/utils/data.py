"""``tapejit.utils.data``: datasets, samplers and ``DataLoader`` with torch.utils.data's API.

Batches are loaded in the calling process.  ``num_workers > 0`` is accepted and still
loads in-process (no worker processes are started), so ``worker_init_fn``,
``pin_memory``, ``prefetch_factor`` and the like are accepted and have no effect.

Shuffling and ``random_split`` draw from tapejit's generator, so ``tapejit.manual_seed``
makes them reproducible; tapejit has no ``Generator`` objects, so ``generator=`` is
refused unless it is None.
"""
import collections.abc
import copy
import itertools
import math
import re
import warnings

import numpy as np

from tapejit.api import front_ends
from tapejit.creation import as_tensor, rng, tensor
from tapejit.dtypes import float64
from tapejit.tensor import Tensor

__all__ = ["BatchSampler", "DataLoader", "Dataset", "RandomSampler", "Sampler",
           "SequentialSampler", "Subset", "SubsetRandomSampler", "TensorDataset",
           "default_collate", "default_convert", "random_split"]


def _refuse_generator(generator, caller):
    if generator is not None:
        raise NotImplementedError(
            f"{caller}: generator= is not supported by tapejit; it draws from tapejit's "
            f"global generator, so call tapejit.manual_seed(seed) for a reproducible order")


# ---- datasets ------------------------------------------------------------------------------

class Dataset:
    """A map-style dataset: subclasses define ``__getitem__`` (and usually ``__len__``)."""

    def __getitem__(self, index):
        raise NotImplementedError("Subclasses of Dataset should implement __getitem__.")


class TensorDataset(Dataset):
    """Samples are ``tuple(t[index] for t in tensors)``: rows along the first dimension."""

    def __init__(self, *tensors):
        if any(tensors[0].size(0) != t.size(0) for t in tensors):
            raise AssertionError("Size mismatch between tensors")  # torch's exception type
        self.tensors = tensors

    def __getitem__(self, index):
        return tuple(t[index] for t in self.tensors)

    def __len__(self):
        return self.tensors[0].size(0)


class Subset(Dataset):
    """The samples of ``dataset`` at ``indices``, in that order."""

    def __init__(self, dataset, indices):
        self.dataset = dataset
        self.indices = indices

    def __getitem__(self, idx):
        if isinstance(idx, list):
            return self.dataset[[self.indices[i] for i in idx]]
        return self.dataset[self.indices[idx]]

    def __getitems__(self, indices):
        parent_indices = [self.indices[i] for i in indices]
        if callable(getattr(self.dataset, "__getitems__", None)):
            return self.dataset.__getitems__(parent_indices)
        return [self.dataset[i] for i in parent_indices]

    def __len__(self):
        return len(self.indices)


def random_split(dataset, lengths, generator=None):
    """Split ``dataset`` into non-overlapping random ``Subset``s of the given lengths, or of
    fractions summing to 1 (floored, the remainder handed out one by one from the first)."""
    _refuse_generator(generator, "random_split")
    if math.isclose(sum(lengths), 1) and sum(lengths) <= 1:
        split_lengths = []
        for i, fraction in enumerate(lengths):
            if fraction < 0 or fraction > 1:
                raise ValueError(f"Fraction at index {i} is not between 0 and 1")
            split_lengths.append(math.floor(len(dataset) * fraction))
        for i in range(len(dataset) - sum(split_lengths)):
            split_lengths[i % len(split_lengths)] += 1
        lengths = split_lengths
        for i, length in enumerate(lengths):
            if length == 0:
                warnings.warn(f"Length of split at index {i} is 0. "
                              f"This might result in an empty dataset.", stacklevel=2)
    if sum(lengths) != len(dataset):
        raise ValueError("Sum of input lengths does not equal the length of the input dataset!")
    indices = rng().permutation(sum(lengths)).tolist()
    return [Subset(dataset, indices[end - length:end])
            for end, length in zip(itertools.accumulate(lengths), lengths)]


# ---- samplers ------------------------------------------------------------------------------

class Sampler:
    """Iterates over dataset indices (or, for a batch sampler, lists of them)."""

    def __init__(self, data_source=None):
        pass

    def __iter__(self):
        raise NotImplementedError


class SequentialSampler(Sampler):
    def __init__(self, data_source):
        self.data_source = data_source

    def __iter__(self):
        return iter(range(len(self.data_source)))

    def __len__(self):
        return len(self.data_source)


class RandomSampler(Sampler):
    """A fresh random permutation per epoch (several when ``num_samples`` exceeds the
    dataset), or ``num_samples`` indices drawn with replacement."""

    def __init__(self, data_source, replacement=False, num_samples=None, generator=None):
        _refuse_generator(generator, "RandomSampler")
        if not isinstance(replacement, bool):
            raise TypeError(f"replacement should be a boolean value, but got replacement={replacement}")
        self.data_source = data_source
        self.replacement = replacement
        self._num_samples = num_samples
        if not isinstance(self.num_samples, int) or self.num_samples <= 0:
            raise ValueError(f"num_samples should be a positive integer value, but got "
                             f"num_samples={self.num_samples}")

    @property
    def num_samples(self):
        return len(self.data_source) if self._num_samples is None else self._num_samples

    def __iter__(self):
        n = len(self.data_source)
        if self.replacement:
            yield from rng().integers(0, n, size=self.num_samples).tolist()
            return
        for _ in range(self.num_samples // n):
            yield from rng().permutation(n).tolist()
        yield from rng().permutation(n).tolist()[:self.num_samples % n]

    def __len__(self):
        return self.num_samples


class SubsetRandomSampler(Sampler):
    """``indices`` in a random order, drawn afresh each epoch."""

    def __init__(self, indices, generator=None):
        _refuse_generator(generator, "SubsetRandomSampler")
        self.indices = indices

    def __iter__(self):
        for i in rng().permutation(len(self.indices)).tolist():
            yield self.indices[i]

    def __len__(self):
        return len(self.indices)


class BatchSampler(Sampler):
    """Groups ``sampler``'s indices into lists of ``batch_size`` (the last may be short
    unless ``drop_last``)."""

    def __init__(self, sampler, batch_size, drop_last):
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size <= 0:
            raise ValueError(f"batch_size should be a positive integer value, but got "
                             f"batch_size={batch_size}")
        if not isinstance(drop_last, bool):   # a ValueError, as torch's
            raise ValueError(  # noqa: TRY004
                f"drop_last should be a boolean value, but got drop_last={drop_last}")
        self.sampler = sampler
        self.batch_size = batch_size
        self.drop_last = drop_last

    def __iter__(self):
        indices = iter(self.sampler)
        while batch := list(itertools.islice(indices, self.batch_size)):
            if len(batch) < self.batch_size and self.drop_last:
                return
            yield batch

    def __len__(self):
        if self.drop_last:
            return len(self.sampler) // self.batch_size
        return (len(self.sampler) + self.batch_size - 1) // self.batch_size


# ---- collation -----------------------------------------------------------------------------

_STRING_OR_OBJECT_DTYPE = re.compile(r"[SaUO]")
_COLLATE_ERROR = ("default_collate: batch must contain tensors, numpy arrays, numbers, "
                  "dicts or lists; found {}")


def _rebuild_mapping(mapping, items):
    """``items`` as a mapping of ``mapping``'s type when it can be made, else a dict."""
    try:
        if isinstance(mapping, collections.abc.MutableMapping):
            clone = copy.copy(mapping)
            clone.update(items)
            return clone
        return type(mapping)(items)
    except TypeError:
        return items


def _rebuild_sequence(sequence, items):
    """``items`` as a sequence of ``sequence``'s type when it can be made, else a list."""
    try:
        if isinstance(sequence, collections.abc.MutableSequence):
            clone = copy.copy(sequence)
            for i, item in enumerate(items):
                clone[i] = item
            return clone
        return type(sequence)(items)
    except TypeError:
        return items


def default_collate(batch):
    """Merge a list of samples into a batch as torch's ``default_collate``: tensors are
    stacked, NumPy arrays and numbers become tensors (Python floats float64, ints int64),
    mappings and sequences are collated field by field (tuples give lists)."""
    elem = batch[0]
    if isinstance(elem, Tensor):
        return front_ends.stack(batch, 0)
    if isinstance(elem, np.ndarray):
        if _STRING_OR_OBJECT_DTYPE.search(elem.dtype.str):
            raise TypeError(_COLLATE_ERROR.format(elem.dtype))
        return default_collate([as_tensor(b) for b in batch])
    if isinstance(elem, (np.bool_, np.number, np.object_)):
        return as_tensor(np.asarray(batch))
    if isinstance(elem, float):
        return tensor(batch, dtype=float64)
    if isinstance(elem, int):   # bools too: they collate to a bool tensor
        return tensor(batch)
    if isinstance(elem, (str, bytes)):
        return batch
    if isinstance(elem, collections.abc.Mapping):
        return _rebuild_mapping(elem, {key: default_collate([d[key] for d in batch]) for key in elem})
    if isinstance(elem, tuple) and hasattr(elem, "_fields"):   # a namedtuple
        return type(elem)(*(default_collate(field) for field in zip(*batch)))
    if isinstance(elem, collections.abc.Sequence):
        size = len(elem)
        if any(len(sample) != size for sample in batch):
            raise RuntimeError("each element in list of batch should be of equal size")
        fields = [default_collate(field) for field in zip(*batch)]
        return fields if isinstance(elem, tuple) else _rebuild_sequence(elem, fields)
    raise TypeError(_COLLATE_ERROR.format(type(elem)))


def default_convert(data):
    """One sample unbatched (``batch_size=None``): NumPy arrays and scalars become tensors,
    containers are converted element by element, anything else is left as is."""
    if isinstance(data, Tensor):
        return data
    if isinstance(data, np.ndarray):
        return data if _STRING_OR_OBJECT_DTYPE.search(data.dtype.str) else as_tensor(data)
    if isinstance(data, (np.bool_, np.number)):
        return as_tensor(data)
    if isinstance(data, collections.abc.Mapping):
        return _rebuild_mapping(data, {key: default_convert(data[key]) for key in data})
    if isinstance(data, tuple) and hasattr(data, "_fields"):
        return type(data)(*(default_convert(d) for d in data))
    if isinstance(data, tuple):
        return [default_convert(d) for d in data]
    if isinstance(data, collections.abc.Sequence) and not isinstance(data, (str, bytes)):
        return _rebuild_sequence(data, [default_convert(d) for d in data])
    return data


# ---- the loader ----------------------------------------------------------------------------

class DataLoader:
    """Iterate over ``dataset`` in batches of ``batch_size`` samples merged by
    ``collate_fn``, in order or shuffled (see the module docstring for workers and
    generators).  ``batch_size=None`` yields single samples through ``default_convert``."""

    def __init__(self, dataset, batch_size=1, shuffle=None, sampler=None, batch_sampler=None,
                 num_workers=0, collate_fn=None, pin_memory=False, drop_last=False, timeout=0,
                 worker_init_fn=None, multiprocessing_context=None, generator=None, *,
                 prefetch_factor=None, persistent_workers=False, pin_memory_device="",
                 in_order=True):
        if num_workers < 0:
            raise ValueError("num_workers option should be non-negative; "
                             "use num_workers=0 to disable multiprocessing.")
        _refuse_generator(generator, "DataLoader")
        if sampler is not None and shuffle:
            raise ValueError("sampler option is mutually exclusive with shuffle")
        if batch_sampler is not None:
            if batch_size != 1 or shuffle or sampler is not None or drop_last:
                raise ValueError("batch_sampler option is mutually exclusive with batch_size, "
                                 "shuffle, sampler, and drop_last")
            batch_size, drop_last = None, False
        elif batch_size is None and drop_last:
            raise ValueError("batch_size=None option disables auto-batching and is mutually "
                             "exclusive with drop_last")
        if sampler is None:
            sampler = RandomSampler(dataset) if shuffle else SequentialSampler(dataset)
        if batch_size is not None and batch_sampler is None:
            batch_sampler = BatchSampler(sampler, batch_size, drop_last)
        if collate_fn is None:
            collate_fn = default_collate if batch_sampler is not None else default_convert

        self.dataset = dataset
        self.batch_size = batch_size
        self.drop_last = drop_last
        self.sampler = sampler
        self.batch_sampler = batch_sampler
        self.num_workers = num_workers
        self.collate_fn = collate_fn
        self.pin_memory = pin_memory
        self.timeout = timeout
        self.worker_init_fn = worker_init_fn
        self.generator = generator

    def __iter__(self):
        dataset, collate = self.dataset, self.collate_fn
        if self.batch_sampler is None:
            for index in self.sampler:
                yield collate(dataset[index])
            return
        fetch_many = getattr(dataset, "__getitems__", None)
        for indices in self.batch_sampler:
            samples = fetch_many(indices) if callable(fetch_many) else [dataset[i] for i in indices]
            yield collate(samples)

    def __len__(self):
        return len(self.sampler if self.batch_sampler is None else self.batch_sampler)
