"""Class labels as replay inputs: a new label batch patches the trace instead of retracing.

(In the core, below the losses that call it: without replay/ no TracedLabels exist and
each function here is a plain read or nothing.)

An int64 tensor argument is passed to ``fn`` as a ``TracedLabels`` tensor.  Every read of
its values goes through its ``_data`` property and marks the argument as read (its
values are then part of the trace, and so of the signature).  The one reader that knows
better is cross-entropy / ``nll_loss`` on (N, C) input without class weights: it picks
``log_probs`` at the flat positions ``row * C + label``, which live in the tape's
``ints``, so it registers a ``LabelPatch`` that rewrites those positions from each
call's labels.  An argument whose only readers patched it is keyed by shape and dtype
alone; a call's labels are checked as eager mode checks them (class range), and labels
equal to ``ignore_index`` -- which change the recorded structure -- trace again.
"""
import numpy as np

from tapejit.tape import state
from tapejit.tensor import Tensor


class TracedLabels(Tensor):
    """An int64 argument while tracing: reads of its values are noted (see the module)."""
    __slots__ = ("_labels", "_position")

    @property
    def _data(self):
        trace = state.trace
        if trace is not None:
            trace.labels_read.add(self._position)
        return self._labels

    @_data.setter
    def _data(self, value):
        self._labels = value


def placeholder(trace, t, position):
    """``t`` (an int64 tensor argument at ``position``) as ``fn`` receives it while tracing."""
    p = TracedLabels.__new__(TracedLabels)
    p._tape = None
    p._off = 0
    p._labels = t._data   # read before fn runs: not a read by fn
    p._shape = t._shape
    p._numel = t._numel
    p._dtype = t._dtype
    p._rg = False
    p._version = 0
    p._grad = None
    p._hooks = None
    p._position = position
    return p


def values(target):
    """A loss's read of class labels ``target``: no mark (the loss decides, see ``patch``)."""
    if type(target) is TracedLabels:
        return target._labels
    return target._value()


def patch(target, ints_at, classes, ignore_index):
    """The positions ``row * classes + label`` of ``target`` are at ``ints[ints_at:]``."""
    if type(target) is TracedLabels and state.trace is not None:
        state.trace.label_patches.append(LabelPatch(target._position, ints_at, target._numel,
                                                    classes, ignore_index))


def read(target):
    """A reader that cannot patch (class weights, ignored labels, label smoothing, ...)."""
    if type(target) is TracedLabels and state.trace is not None:
        state.trace.labels_read.add(target._position)


class LabelPatch:
    __slots__ = ("position", "ints_at", "n", "classes", "ignore_index", "rows")

    def __init__(self, position, ints_at, n, classes, ignore_index):
        self.position, self.ints_at, self.n = position, ints_at, n
        self.classes, self.ignore_index = classes, ignore_index
        self.rows = np.arange(n, dtype=np.int64) * classes

    def fits(self, labels):
        """Whether this trace can take ``labels`` (False: some are ``ignore_index``, which
        changes what is recorded); raises eager mode's error for a label out of range."""
        labels = labels.reshape(-1)
        ignore = self.ignore_index
        if labels.size and labels.min() >= 0 and labels.max() < self.classes and not (
                0 <= ignore < self.classes and (labels == ignore).any()):
            return True     # the usual batch, in two reductions
        if (labels == ignore).any():
            return False
        bad = (labels < 0) | (labels >= self.classes)
        if bad.any():
            raise IndexError(f"Target {labels[bad][0]} is out of bounds. (cross_entropy: "
                             f"{self.classes} classes, ignore_index={self.ignore_index})")
        return True

    def write(self, ints, labels):
        """This call's positions into the trace's ``ints`` (under the trace's lock)."""
        np.add(self.rows, labels.reshape(-1), out=ints[self.ints_at:self.ints_at + self.n])


def patchable(trace):
    """Positions of label arguments whose every reader registered a patch."""
    patched = {p.position for p in trace.label_patches}
    return patched - trace.labels_read
