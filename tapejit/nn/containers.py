"""``Sequential`` and ``ModuleList``: modules holding numbered submodules."""
import operator
from collections import OrderedDict

from tapejit.nn.module import Module, _addindent


def _index(container, idx):
    """``idx`` as a position in ``container`` (negative counts from the end)."""
    idx = operator.index(idx)
    n = len(container)
    if not -n <= idx < n:
        raise IndexError(f"index {idx} is out of range")
    return idx % n


def _renumber(container, modules):
    """Re-register ``modules`` under the names "0".."n-1" (after a deletion or insertion)."""
    for key in list(container._modules.keys()):
        delattr(container, key)
    for i, module in enumerate(modules):
        container.add_module(str(i), module)


class _Numbered(Module):
    """What ``Sequential`` and ``ModuleList`` share: children named "0".."n-1" that behave
    as a list (length, iteration, deletion with renumbering, append, extend)."""

    def __len__(self):
        return len(self._modules)

    def __iter__(self):
        return iter(self._modules.values())

    def __delitem__(self, idx):
        modules = list(self._modules.values())
        del modules[idx if isinstance(idx, slice) else _index(self, idx)]
        _renumber(self, modules)  # torch renumbers the rest "0".."n-1"

    def append(self, module):
        self.add_module(str(len(self)), module)
        return self

    def extend(self, modules):
        for module in modules:
            self.append(module)
        return self


class Sequential(_Numbered):
    """``Sequential(m0, m1, ...)`` or ``Sequential(OrderedDict(name=module))``: calls the
    modules in order, each on the previous one's output."""

    def __init__(self, *args):
        super().__init__()
        if len(args) == 1 and isinstance(args[0], OrderedDict):
            for name, module in args[0].items():
                self.add_module(name, module)
        else:
            for i, module in enumerate(args):
                self.add_module(str(i), module)

    def forward(self, input):
        for module in self._modules.values():
            input = module(input)
        return input

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(OrderedDict(list(self._modules.items())[idx]))
        return list(self._modules.values())[_index(self, idx)]

    def __setitem__(self, idx, module):
        key = list(self._modules.keys())[_index(self, idx)]
        self.add_module(key, module)

    def insert(self, index, module):
        n = len(self)
        if not -n <= index <= n:
            raise IndexError(f"Index out of range: {index}")
        modules = list(self._modules.values())
        modules.insert(index % (n + 1) if index < 0 else index, module)
        _renumber(self, modules)
        return self


class ModuleList(_Numbered):
    """A list of modules, registered so their parameters are found; no ``forward``."""

    def __init__(self, modules=None):
        super().__init__()
        if modules is not None:
            self.extend(modules)

    def __getitem__(self, idx):
        if isinstance(idx, slice):
            return type(self)(list(self._modules.values())[idx])
        return self._modules[str(_index(self, idx))]

    def __setitem__(self, idx, module):
        self.add_module(str(_index(self, idx)), module)

    def __iadd__(self, modules):
        return self.extend(modules)

    def __add__(self, other):
        return ModuleList(list(self) + list(other))

    def insert(self, index, module):
        modules = list(self._modules.values())
        modules.insert(index, module)
        _renumber(self, modules)

    def __repr__(self):
        # torch compresses runs of identical children: "(0-1): 2 x Linear(...)".
        items = [(int(name), repr(module)) for name, module in self._modules.items()]
        if not items:
            return "ModuleList()"
        lines = []
        start = 0
        while start < len(items):
            end = start
            while end + 1 < len(items) and items[end + 1][1] == items[start][1]:
                end += 1
            text = _addindent(items[start][1], 2)
            if end == start:
                lines.append(f"({items[start][0]}): {text}")
            else:
                lines.append(f"({items[start][0]}-{items[end][0]}): {end - start + 1} x {text}")
            start = end + 1
        return "ModuleList(\n  " + "\n  ".join(lines) + "\n)"
