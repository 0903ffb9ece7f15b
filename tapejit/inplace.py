"""In-place ops: version counters and PyTorch's errors for them.

Values on a tape are never overwritten by ops: an in-place op records its out-of-place
result and rebinds the tensor to it (a leaf's own array is written instead).  What
PyTorch forbids is still forbidden: an in-place op on a leaf that requires grad, and
backward through a record that saved a value later modified in place; those records are
marked (``freed[r] = 2``) and the sweep stops there with PyTorch's message.

Aliases.  ``detach()``, ``.data`` and ``detach_()`` give tensors that share their
source's value, as torch's share storage (``_Shared``): an in-place change through one
is seen by all, including the recorded tensor (whose arena slot is written), after the
tape has computed what was recorded before.  ``detach()`` and ``detach_()`` also share
the version counter, so backward through a record that saved the value raises torch's
error; ``.data`` does not (torch's backward then silently uses the new value, and so
does tapejit's).  A few of tapejit's backward rules read a value torch does not save
(``pow``'s reads its result): a change of that value through an alias raises there too,
where torch would not need the value.
"""
import weakref

import numpy as np

from tapejit import executor, registry, tape as _tape
from tapejit.dtypes import SCALAR_TYPE_NAMES
from tapejit.printing import type_name
from tapejit.shapes import numel as _numel
from tapejit.recording import cast
from tapejit.tape import state, recording_tape
from tapejit.tensor import _taped, provide as _provide_to_tensor

LEAF_ERROR = "a leaf Variable that requires grad is being used in an in-place operation."
LEAF_VIEW_ERROR = ("a view of a leaf Variable that requires grad is being used in an in-place "
                   "operation.")


def _saving_records(tape, arena, off, before, table):
    """Records before index ``before`` on ``tape`` whose backward reads the value at (arena,
    off), by ``table`` (``_saved_table()`` or ``_extra_table()``)."""
    tape.flush()
    rec = tape.rec[:min(tape.nrec, before)]
    if not len(rec):
        return np.zeros(0, np.int64)
    codes = rec[:, 0]
    same_arena = (codes & 1) == arena
    a = np.where(rec[:, 2] < 0, ~rec[:, 2], rec[:, 2])
    b = np.where(rec[:, 3] < 0, ~rec[:, 3], rec[:, 3])
    ops = codes >> 1
    if np.ndim(off):   # several values (a value and its views)
        at_a, at_b, at_out = np.isin(a, off), np.isin(b, off), np.isin(rec[:, 1], off)
    else:
        at_a, at_b, at_out = a == off, b == off, rec[:, 1] == off
    saves_a = table[ops, 0]
    saves_b = table[ops, 1]
    if table.shape[1] > 3:   # saved only for the other operand's gradient (torch's mul, div)
        saves_a = saves_a | (table[ops, 3] & (rec[:, 3] >= 0))
        saves_b = saves_b | (table[ops, 4] & (rec[:, 2] >= 0))
    hit = same_arena & ((at_a & saves_a) | (at_b & saves_b) | (at_out & table[ops, 2]))
    return np.flatnonzero(hit)


#: ops whose result is a view in torch (sharing the version counter of what it views)
_VIEW_OPS = ("reshape", "unsqueeze", "squeeze", "squeeze_dim", "select", "slice", "unbind", "permute",
             "transpose", "t", "expand", "strided_slice")
_IS_VIEW = []


def _with_views(tape, arena, off, before):
    """``off`` and the slots of records before ``before`` that are views of it in torch,
    transitively (a broadcast operand's expand, an amax's permuted copy, ``y[0]``): in torch
    they share its version counter, so a record that saved one of them is refused too."""
    if not _IS_VIEW or len(_IS_VIEW[0]) != len(registry.OPS):
        names = set(_VIEW_OPS)
        _IS_VIEW[:] = [np.array([op.name in names for op in registry.OPS], bool)]
    rec = tape.rec[:min(tape.nrec, before)]
    rows = np.flatnonzero(((rec[:, 0] & 1) == arena) & _IS_VIEW[0][rec[:, 0] >> 1])
    if not len(rows):
        return off
    src = rec[rows, 2]
    src = np.where(src < 0, ~src, src)
    found = {off}
    frontier = [off]
    while frontier:
        new = set(rec[rows[np.isin(src, frontier)], 1].tolist()) - found
        found |= new
        frontier = list(new)
    return off if len(found) == 1 else np.fromiter(found, np.int64)


_SAVED = []
_EXTRA = []


def _saved_table():
    """Opcode -> (operand a, operand b, result, a if b needs a gradient, b if a does) saved
    for backward, as torch saves them (``Op.saved``: "a", "b", "o"; "A", "B": saved only for
    the other operand's gradient)."""
    if not _SAVED or len(_SAVED[0]) != len(registry.OPS):
        table = np.zeros((len(registry.OPS), 5), bool)
        for op in registry.OPS:
            if op.saves:
                table[op.opcode] = [c in op.saved for c in "aboAB"]
        _SAVED[:] = [table]
    return _SAVED[0]


def _extra_table():
    """Opcode -> the values tapejit's backward rule reads that torch does not save (pow's
    rule reads its result, torch's its input)."""
    if not _EXTRA or len(_EXTRA[0]) != len(registry.OPS):
        executor._kind_table()
        reads = executor._saved
        table = np.stack([(reads & 1) != 0, (reads & 2) != 0, (reads & 4) != 0], axis=1)
        saved = _saved_table()
        _EXTRA[:] = [table & ~(saved[:, :3] | np.stack([saved[:, 3], saved[:, 4], saved[:, 2]], axis=1))]
    return _EXTRA[0]


DETACHED_IN_PLACE = ("Trying to use a saved tensor that has been detached in-place, i.e. with "
                     ".detach_().This is not supported, please use out-of-place `.detach()` instead")


def poison(tape, arena, off, t, old_version, before=None, saved=True, extra=False, message=None):
    """Mark the records of ``tape`` that read the value at (arena, off) for their backward
    and were recorded before ``before``: ``t`` (at ``old_version``) is changing in place.
    ``saved``: the records torch would refuse (torch's error, or ``message``); ``extra``:
    those reading a value only tapejit's rule needs, when that value's memory itself is
    written (an alias)."""
    if before is None:
        before = tape.n
    marks = []
    if saved:
        tape.flush()
        marks.append((_saving_records(tape, arena, _with_views(tape, arena, off, before), before,
                                      _saved_table()), False))
    if extra:
        marks.append((_saving_records(tape, arena, off, before, _extra_table()), True))
    for rows, tapejit_only in marks:
        for r in rows.tolist():
            if tape.freed[r]:   # poisoned already, or freed: torch reports the freed graph first
                continue
            if tape.poisoned is None:
                tape.poisoned = {}
            tape.freed[r] = 2
            node = registry.OPS[tape.rec[r, 0] >> 1].node
            if message is not None and not tapejit_only:
                tape.poisoned[r] = message
            elif tapejit_only:
                tape.poisoned[r] = (
                    f"a value {node} needs for its gradient was modified by an inplace operation "
                    f"through a tensor sharing its memory (detach(), .data): [{type_name(t)} "
                    f"{list(t._shape)}].  tapejit's {node} reads that value where torch's reads "
                    f"another, so tapejit cannot compute this gradient; clone() the value before "
                    f"changing it in place.")
            else:
                tape.poisoned[r] = (
                    f"one of the variables needed for gradient computation has been modified by an "
                    f"inplace operation: [{type_name(t)} {list(t._shape)}], which is used by {node}, "
                    f"is at version {old_version + 1}; expected version {old_version} instead. Hint: "
                    f"the backtrace further above can point to the operation that failed to compute "
                    f"its gradient. The variable in question was changed in there or anywhere later. "
                    f"Good luck!")


def _poison_loads(tape, t, old, before):
    for d in (0, 1):
        for off, _, source in tape.loads_of.get((id(t), d), ()):
            if source is t:
                poison(tape, d, off, t, old, before)


def check_write(t):
    """An in-place change of concrete tensor ``t``: a tj.compile trace refuses it if ``t`` was
    made outside the traced function."""
    if state.trace is not None:
        state.trace.on_write(t)


def note_leaf_write(t, before=None):
    """A concrete tensor's array is about to change: poison saved uses on this thread's
    tape, and let tensors sharing the value (``_Shared``) follow."""
    if state.trace is not None:
        state.trace.on_write(t)
    old = getattr(t, "_version", 0)
    t._version = old + 1
    tape = state.tape
    if tape is None and state.hold is not None:
        tape = state.hold[0]
    if tape is not None:
        _poison_loads(tape, t, old, before)
    if state.opened:   # graphs on this thread's retired tapes that may still run backward
        for ref, serial in state.opened:
            other = ref()
            if other is not None and other.serial == serial and other is not tape:
                _poison_loads(other, t, old, None)
    if _shared:
        shared = _shared.get(id(t))
        if shared is not None:
            shared.before_write(t, old, tape, before)


def note_writes_since_loads(tape):
    """Before a backward through ``tape`` when it is no longer the thread's recording tape
    (a backward of another graph on it retired it, or it retired for its size and then such
    a backward forgot it): ``note_leaf_write`` marked only the tapes it knew of, so each
    value loaded here is checked against its tensor's version counter, as torch checks its
    saved tensors when backward unpacks them."""
    for (_, d), loads in tape.loads_of.items():
        for i, (off, version, source) in enumerate(loads):
            now = getattr(source, "_version", 0)
            if now != version:
                poison(tape, d, off, source, version)
                loads[i] = (off, now, source)   # marked once: a later backward need not scan again


# ---- values shared by a tensor and its aliases ----------------------------------------

#: id(tensor) -> its _Shared, for every tensor sharing its value with another
_shared = {}


def _gone():
    return None


class _Member(weakref.ref):
    """A weak reference to a tensor sharing a value: ``shares``, the version counter too."""
    __slots__ = ("key", "shared", "shares")


def _member_gone(member):
    if _shared is None:   # interpreter shutdown: this module's globals are cleared already
        return
    member.shared.leave(member.key)


class _Shared:
    """A tensor's value and the aliases that share it (``detach()``, ``.data``, ``detach_()``).

    ``base`` is the tensor whose value the others alias: recorded (its value is an arena
    slot) or a leaf (an array, which its aliases hold too).  ``members`` maps id -> (weak
    reference, shares the version counter).  ``slot`` remembers where a recorded base's
    value lives, for when the base itself is gone: records saving it must still be marked
    when an alias changes it.  An alias of a recorded value holds a view of the slot, the
    tape hands it a copy before reusing its arenas (``Tape.release_views``); writes then
    go to the slot again (``before_write``)."""
    __slots__ = ("base", "members", "slot", "keep")

    def __init__(self, base, keep=None):
        self.members = {}
        self.slot = None
        self.keep = keep    # detach_(): the recorded twin standing for the tensor's old self
        self.base = self.join(base, True)
        if base._tape is not None:
            self.note_slot()

    def join(self, t, shares):
        key = id(t)
        member = _Member(t, _member_gone)
        member.key = key
        member.shared = self
        member.shares = shares
        self.members[key] = member
        _shared[key] = self
        return member

    def leave(self, key):
        member = self.members.pop(key, None)
        if _shared.get(key) is self:
            del _shared[key]
        if member is not None and member is self.base:   # gone, or took another array
            self.base = _gone
        members = self.members
        if len(members) <= 1 and (not members or self.base is not _gone):
            for other in list(members):   # no alias left: nothing to share
                if _shared.get(other) is self:
                    del _shared[other]
            members.clear()

    def note_slot(self):
        base = self.base()
        if base is not None and base._tape is not None:
            tape = base._tape
            self.slot = (weakref.ref(tape), tape.serial, base._dtype.arena, base._off, base._numel,
                         base._shape)
        elif base is not None:
            self.slot = None

    def live_slot(self):
        """``(tape, arena, off, numel, shape)`` of the shared value if it is a recorded one."""
        self.note_slot()
        if self.slot is None:
            return None
        ref, serial, arena, off, numel, shape = self.slot
        tape = ref()
        if tape is None or tape.serial != serial:
            self.slot = None
            return None
        return tape, arena, off, numel, shape

    def alive(self):
        for member in list(self.members.values()):
            t = member()
            if t is not None:
                yield t, member.shares

    def repoint(self, tape, arena, off, numel, shape):
        """Every alias views the slot's current memory (after growth, or a copy handed out)."""
        tape.flush()
        view = tape.vals[arena][off:off + numel].reshape(shape)
        for t, _ in self.alive():
            if t._tape is None:
                t._data = view
        tape.views = True
        return view

    def before_write(self, t, old, recording, before):
        """``t``'s array is about to be written in place (``note_leaf_write`` has bumped its
        own version and marked its own loads)."""
        member = self.members.get(id(t))
        versioned = member is not None and member.shares
        slot = self.live_slot()
        if slot is not None:
            tape = slot[0]
            tape.flush()    # records made before this write compute with the value before it
            self.repoint(*slot)
            poison(tape, slot[1], slot[2], t, old, before if tape is recording else None,
                   saved=versioned, extra=True)
        base = self.base()
        if versioned:
            for other, shares in self.alive():
                if other is t or not shares:
                    continue
                was = getattr(other, "_version", 0)
                other._version = old + 1
                if other._tape is None and recording is not None:
                    _poison_loads(recording, other, was, before)
        elif base is not None and base._tape is None and base is not t and recording is not None:
            # ``.data`` of a leaf: the leaf's new value reaches the graph as torch's saved
            # tensors would see it: later ops load it again, backward reads it (Tape.stale).
            loaded = False
            for d in (0, 1):
                entry = recording.loaded.pop((id(base), d), None)
                loaded = loaded or entry is not None or bool(recording.loads_of.get((id(base), d)))
            if loaded:
                recording.flush()
                if recording.stale is None:
                    recording.stale = []
                recording.stale.append(base)

    def after_rebind(self, t):
        """``t`` now holds another value (an in-place op recorded its result, or gave it a new
        array): the others follow, as torch's in-place ops write the shared storage."""
        base = self.base()
        if t is base:
            self.note_slot()
            slot = self.live_slot()
            if slot is not None:
                self.repoint(*slot)
            else:
                for other, _ in self.alive():
                    if other is not t and other._tape is None:
                        other._data = t._data
            recording = recording_tape()
            for other, shares in self.alive():
                if other is not t and shares:
                    was = getattr(other, "_version", 0)
                    other._version = getattr(t, "_version", 0)
                    if other._tape is None and recording is not None:
                        _poison_loads(recording, other, was, None)
            return
        if t._tape is None:
            return
        # An alias took a recorded value (an op with an operand that requires grad): its
        # value is written to the shared memory; the alias itself now has its own slot.
        t._tape.flush()
        value = t._tape.value(t)
        slot = self.live_slot()
        if slot is not None:
            self.repoint(*slot)[...] = value
        elif base is not None and base._tape is None:
            base._data[...] = value
        else:
            for other, _ in self.alive():
                if other is not t and other._tape is None:
                    other._data[...] = value
                    break
        self.leave(id(t))


def share_value(alias, source, versioned, keep=None):
    """Make ``alias`` (a concrete tensor holding ``source``'s value) share it with ``source``:
    ``detach()`` (``versioned``: one version counter, as torch) or ``.data`` (not)."""
    shared = _shared.get(id(source))
    if shared is None or keep is not None:
        shared = _Shared(keep if keep is not None else source, keep)
    else:
        member = shared.members.get(id(source))
        versioned = versioned and member is not None and member.shares
    shared.join(alias, versioned)
    if versioned:
        alias._version = getattr(source, "_version", 0)
    if source._tape is not None:   # a view of its arena: see Tape.release_views
        source._tape.views = True
    return alias


def release_views(tape):
    """Tensors sharing a value recorded on ``tape`` get a copy of their view of its arenas
    (one per shared value), so the arenas can be reused or freed.  Their writes go to the
    slot again while the tape still holds that value (``_Shared.before_write``)."""
    arenas = [id(v) for v in tape.vals]
    for shared in {id(s): s for s in _shared.values()}.values():
        copy = None
        for t, _ in shared.alive():
            if t._tape is not None:
                continue
            base = t._data.base
            if base is not None and id(base) in arenas:
                if copy is None:
                    copy = t._data.copy()
                t._data = copy


def leave_shared(t):
    """``t`` takes another array (``t.data = other``): as in torch, its aliases keep the old one."""
    if _shared:
        shared = _shared.get(id(t))
        if shared is not None:
            shared.leave(id(t))


def detach_in_place(t):
    """``t.detach_()``: ``t`` becomes a leaf without history, sharing its value and version
    counter with the record it was (which keeps the graph's view of it)."""
    if getattr(t, "_view", None) is not None:
        raise RuntimeError(
            "Can't detach views in-place. Use detach() instead. If you are using DistributedDataParallel "
            "(DDP) for training, and gradient_as_bucket_view is set as True, gradients are views of DDP "
            "buckets, and hence detach_() cannot be called on these gradients. To fix this error, please "
            "refer to the Optimizer.zero_grad() function in torch/optim/optimizer.py as the solution.")
    tape = t._tape
    if tape is None:
        t._rg = False
        return t
    twin = _taped(tape, t._off, t._shape, t._numel, t._dtype, t._rg)
    twin._version = getattr(t, "_version", 0)
    value = t._value()
    t._tape = None
    t._off = 0
    t._data = value
    t._rg = False
    t._node = None
    t._grad = None
    t._hooks = None
    share_value(t, twin, True, keep=twin)
    poison(tape, twin._dtype.arena, twin._off, t, twin._version, message=DETACHED_IN_PLACE)
    return t


def in_place(name, fn):
    """The method ``name`` (``add_``, ``exp_``, ...): ``fn(input, *args)`` stored into ``input``."""
    def method(input, *args, **kwargs):
        return apply_inplace(input, lambda: fn(input, *args, **kwargs), name)
    method.__name__ = method.__qualname__ = name
    method.__doc__ = f"``{fn.__name__}`` in place."
    # fn's parameters, for inspect.signature: api.install's front end then checks them as
    # fn's own, naming this method ("add_(): argument 'other' ...")
    method.__wrapped__ = fn
    return method


def check_leaf(t, op):
    if t._tape is None and t._rg and state.grad:
        raise RuntimeError(LEAF_ERROR)


def apply_inplace(t, compute, op="in-place op", writing=None, since=None):
    """Make ``t`` hold ``compute()`` (its new value), with PyTorch's in-place semantics.

    ``compute`` records the out-of-place result; records it adds are the in-place op's
    own, so only earlier records that saved ``t``'s old value are marked.  ``writing``:
    the view whose in-place op this write of its base is (it already holds its value);
    ``since``: the first record of that op."""
    view = getattr(t, "_view", None)
    if view is not None:
        return _through_view(t, view, compute, op)
    if since is None and (_views_of or _written_slots):
        tape = recording_tape()
        since = tape.n if tape is not None else None
    _apply(t, compute, op, since)
    if _views_of or _written_slots:
        # the op's own records (from ``since``) saved values before its write: not refused
        refresh_views(t, writing, (recording_tape(), since))
    return t


# ---- views: one storage in torch, copies here ---------------------------------------------
#
# A view of a recorded tensor is a record of its own (a copy), and a view of a tensor with
# no history a NumPy view; both carry ``_view = (base, where, stamp)`` (tapejit/ops/
# views.py ``_viewed``) and are registered with the root of their chain of bases.  An
# in-place op on a view writes its elements into the root (torch's ``CopySlices``); after
# any in-place change of a root its recorded views take their elements again, so a view
# read later holds the new values as torch's does, and records that saved a view's old
# value are marked as for any in-place change.

#: ``_view`` of a row from iterating a tensor (``unbind``), which torch refuses to modify in place
ONE_OF_SEVERAL = "unbind"

#: id(root) -> {id(view): weak reference} for the live views of that root
_views_of = {}


class _Above:
    """The view functions of ops/ (above this module) that in-place ops on views call:
    ops/views.py and ops/indexing.py hand them over at import with ``provide``."""
    __slots__ = ("view_again", "torch_strides", "assign_positions")


above = _Above()


def provide(**functions):
    for name, function in functions.items():
        setattr(above, name, function)


def view_positions(base, where, shape):
    """Flat positions in ``base`` of a view's elements, in the view's shape."""
    if type(where) is int:
        return np.arange(where, where + _numel(shape), dtype=np.int64).reshape(shape)
    sizes, strides, start = where
    flat = np.arange(max(base._numel, 1), dtype=np.int64)
    return np.lib.stride_tricks.as_strided(flat[start:], shape=sizes,
                                           strides=[s * flat.itemsize for s in strides]).copy()


def refuse_overlap(op, arr):
    if arr.size and any(st == 0 and n > 1 for n, st in zip(arr.shape, arr.strides)):
        raise RuntimeError(
            f"{op}: unsupported operation: more than one element of the written-to tensor refers to "
            f"a single memory location. Please clone() the tensor before performing the operation.")


class _ViewRef(weakref.ref):
    __slots__ = ("root", "key")


def _view_gone(ref):
    refs = _views_of.get(ref.root)
    if refs is not None:
        refs.pop(ref.key, None)
        if not refs:
            del _views_of[ref.root]


def _root(x):
    view = getattr(x, "_view", None)
    while type(view) is tuple:
        x = view[0]
        view = getattr(x, "_view", None)
    return x


def shares_root_memory(t):
    """Whether ``t``, with no history, is a NumPy view of its root's memory (writing it
    writes the root)."""
    root = _root(t)
    return root._tape is None and np.may_share_memory(t._data, root._data)


def register_view(t, base):
    """``t`` (its ``_view`` set) is a view of ``base``: follow in-place changes of the root."""
    key = id(_root(base))
    ref = _ViewRef(t, _view_gone)
    ref.root = key
    ref.key = id(t)
    refs = _views_of.get(key)
    if refs is None:
        _views_of[key] = {id(t): ref}
    else:
        refs[id(t)] = ref


def _depth(v):
    n = 0
    view = v._view
    while type(view) is tuple:
        n += 1
        view = getattr(view[0], "_view", None)
    return n


def _stale(v):
    base, _, (tape, off, _) = v._view
    return tape is not base._tape or off != base._off


def _take_again(v, since=(None, None)):
    """View ``v`` takes its elements of its base again: its old value is gone, as in
    torch, where the base's in-place change bumps the version counter they share.
    ``since``: (tape, first record of the in-place op that changed the base)."""
    base, where, _ = v._view
    new = above.view_again(base, where, v._shape)
    old = getattr(v, "_version", 0)
    if v._tape is not None:
        poison(v._tape, v._dtype.arena, v._off, v, old, since[1] if v._tape is since[0] else None)
    elif _shared or _views_of:
        note_leaf_write(v)
    v._version = old + 1
    _rebind(v, new)
    v._view = (base, where, (base._tape, base._off, None))


def note_write(t, before=None):
    """``note_leaf_write`` for a tensor with no history that may share its memory with
    views of one root (NumPy views): torch's views share one version counter, so records
    that saved any of them are marked."""
    note_leaf_write(t, before)
    if _views_of:
        _note_group_write(t, _root(t), before)


def _note_group_write(t, root, before):
    refs = _views_of.get(id(root))
    if refs is not None:
        tape = state.tape
        for other in [root] + [ref() for ref in list(refs.values())]:
            if other is None or other is t or other._tape is not None:
                continue
            old = getattr(other, "_version", 0)
            other._version = old + 1
            if tape is not None:
                _poison_loads(tape, other, old, before)


#: id(root) -> [(tape, serial, arena, off, shape, dtype)]: the values in-place ops through
#: views of the root gave those views (torch: views of the root's storage, sharing its
#: version counter), so a later change of the root refuses the records that saved them
_written_slots = {}


def _note_written(root, t):
    tape = t._tape
    slots = _written_slots.get(id(root))
    if slots is None:
        slots = _written_slots[id(root)] = []
        weakref.finalize(root, _written_slots.pop, id(root), None)
    slots.append((weakref.ref(tape), tape.serial, t._dtype.arena, t._off, t._shape, t._dtype))


def _poison_written(root, since=(None, None)):
    slots = _written_slots.get(id(root))
    live = []
    for ref, serial, arena, off, shape, dt in slots:
        tape = ref()
        if tape is None or tape.serial != serial:
            continue
        live.append((ref, serial, arena, off, shape, dt))
        view = _taped(tape, off, shape, 0, dt, False)   # for the message
        poison(tape, arena, off, view, getattr(root, "_version", 1) - 1, since[1] if tape is since[0] else None)
    slots[:] = live


def refresh_views(root, writing=None, since=(None, None)):
    """``root`` changed in place: its views that are copies take their elements again,
    bases before their views (``writing``, the view the change came through, holds its
    new value already; ``since``: (tape, first record of the change))."""
    if _written_slots and id(root) in _written_slots:
        _poison_written(root, since)
    refs = _views_of.get(id(root))
    if not refs:
        return
    live = [v for v in (ref() for ref in list(refs.values()))
            if v is not None and type(getattr(v, "_view", None)) is tuple]
    live.sort(key=_depth)
    for v in live:
        if not _stale(v):
            continue
        if v is writing:
            base, where, _ = v._view
            v._view = (base, where, (base._tape, base._off, None))
        else:
            _take_again(v, since)


#: id -> weak reference, for the outputs of split/chunk that require grad: torch refuses
#: in-place ops on them (and on views of them)
_multi_output = {}


def mark_multi_output(outputs, op):
    for t in outputs:
        if t._rg:
            key = id(t)
            _multi_output[key] = (weakref.ref(t, lambda _, key=key: _multi_output.pop(key, None)), op)


def _chain(t):
    """``t`` and its bases up to the root; refuses outputs of unbind (torch's error)."""
    chain = [t]
    view = getattr(t, "_view", None)
    while view is not None:
        if view is ONE_OF_SEVERAL:
            raise RuntimeError(
                "an output of UnbindBackward0 is a view and is being modified inplace. This view is the "
                "output of a function that returns multiple views (iterating a tensor, unbind). Such "
                "functions do not allow the output views to be modified inplace. You should replace the "
                "inplace operation by an out-of-place one.")
        chain.append(view[0])
        view = getattr(view[0], "_view", None)
    return chain


def root_positions(t):
    """``t``'s root and the flat positions of ``t``'s elements in it (a view whose base
    changed since it was taken takes it again first)."""
    chain = _chain(t)
    positions = None
    for v in reversed(chain[:-1]):   # bases first
        if _stale(v):
            _take_again(v)
        base, where, _ = v._view
        local = view_positions(base, where, v._shape)
        positions = local if positions is None else positions.reshape(-1)[local]
    if positions is None:
        positions = np.arange(t._numel, dtype=np.int64).reshape(t._shape)
    return chain[-1], positions


def check_view_leaf(root):
    if root._tape is None and root._rg and state.grad:
        raise RuntimeError(LEAF_VIEW_ERROR)


def _through_view(t, view, compute, op):
    """An in-place op on a view: the view's elements of its root are replaced too (PyTorch's
    ``CopySlices``), as ``root[positions] = new value``; then the root's other views follow
    (``refresh_views``)."""
    if view is ONE_OF_SEVERAL:
        raise RuntimeError(
            f"{op}: an output of UnbindBackward0 is a view and is being modified inplace. This view "
            f"is the output of a function that returns multiple views (iterating a tensor, unbind). "
            f"Such functions do not allow the output views to be modified inplace. You should replace "
            f"the inplace operation by an out-of-place one.")
    chain = _chain(t)
    root = chain[-1]
    check_view_leaf(root)
    if _multi_output and state.grad:
        for v in chain[:-1]:
            hit = _multi_output.get(id(v))
            if hit is not None and hit[0]() is v:
                raise RuntimeError(
                    f"{op}: Output 0 of {hit[1]} is a view and is being modified inplace. This view is the "
                    f"output of a function that returns multiple views. Such functions do not allow the "
                    f"output views to be modified inplace. You should replace the inplace operation by an "
                    f"out-of-place one.")
    if t._numel:
        strides = above.torch_strides(t)
        if strides is None or any(st == 0 and n > 1 for n, st in zip(t._shape, strides)):
            raise RuntimeError(
                f"{op}: unsupported operation: more than one element of the written-to tensor refers "
                f"to a single memory location (a view of shape {list(t._shape)} of a tensor of shape "
                f"{list(root._shape)}). Please clone() the tensor before performing the operation.")
    _, positions = root_positions(t)
    tape = recording_tape()
    since = tape.n if tape is not None else None   # the op's own records follow
    t._view = None   # the op itself, on the view alone
    try:
        _apply(t, compute, op)
    finally:
        t._view = view
    if t._tape is None and shares_root_memory(t):
        _note_group_write(t, root, None)   # a NumPy view of the root's memory: written already
        return t
    above.assign_positions(root, positions, t, writing=t, since=since)
    if t._tape is not None:
        _note_written(root, t)
    return t


def _rebind(t, other):
    """``t`` takes ``other``'s value and history (the rest of ``t`` stays)."""
    t._tape = other._tape
    t._off = other._off
    t._rg = other._rg
    t._data = getattr(other, "_data", None) if other._tape is None else None
    t._node = None


def _apply(t, compute, op, since=None):
    check_leaf(t, op)
    if t._tape is None and 0 in t._data.strides:   # an expanded view of a tensor with no history
        refuse_overlap(op, t._data)
    tape = recording_tape()
    before = tape.n if tape is not None else 0   # records from here on are this op's own
    if since is not None:
        before = min(before, since)
    result = compute()
    if result._shape != t._shape:
        raise RuntimeError(
            f"{op}: output with shape {list(t._shape)} doesn't match the broadcast shape "
            f"{list(result._shape)}")
    if result._dtype is not t._dtype:
        if result._dtype.is_floating_point and not t._dtype.is_floating_point:
            raise RuntimeError(
                f"result type {SCALAR_TYPE_NAMES[result._dtype.name]} can't be cast to the desired output "
                f"type {SCALAR_TYPE_NAMES[t._dtype.name]}")
        result = cast(result, t._dtype)
    if t._tape is None and result._tape is None:
        value = result._value()
        note_write(t, before)
        np.copyto(t._data, value)
        return t
    if result._tape is None:
        # A value with no history replaces a recorded one (zeroed, filled, copied from a
        # constant): ``t`` becomes a plain tensor holding it.
        if t._tape is not None:
            poison(t._tape, t._dtype.arena, t._off, t, getattr(t, "_version", 0),
                   before if t._tape is tape else None)
            t._version = getattr(t, "_version", 0) + 1
        else:
            note_write(t, before)
        t._tape = None
        t._off = 0
        t._data = np.array(result._value(), dtype=t._dtype.np)
        t._rg = False
        t._node = None
        _rebound(t)
        return t
    if t._tape is not None:
        old = getattr(t, "_version", 0)
        poison(t._tape, t._dtype.arena, t._off, t, old, before if t._tape is tape else None)
        if t._tape is tape:
            _poison_own_operand(tape, t, old, before)
        t._version = old + 1
    else:
        note_write(t, before)
    t._tape = result._tape
    t._off = result._off
    t._rg = result._rg
    t._data = None
    t._node = None
    _rebound(t)
    return t


def _poison_own_operand(tape, t, old, before):
    """``y.mul_(y)``: the op's own record saved ``t``'s old value as its other operand, which
    torch's in-place op then changes (self itself is saved before the change)."""
    tape.flush()
    rec = tape.rec[before:tape.nrec]
    if not len(rec):
        return
    table = _saved_table()
    ops = rec[:, 0] >> 1
    b = np.where(rec[:, 3] < 0, ~rec[:, 3], rec[:, 3])
    saves_b = table[ops, 1] | (table[ops, 4] & (rec[:, 2] >= 0))
    hit = ((rec[:, 0] & 1) == t._dtype.arena) & (b == t._off) & (rec[:, 3] != -1) & saves_b
    rows = np.flatnonzero(hit) + before
    if len(rows):
        poison(tape, t._dtype.arena, t._off, t, old, before + int(rows.max()) + 1)


def _rebound(t):
    if _shared:
        shared = _shared.get(id(t))
        if shared is not None:
            shared.after_rebind(t)


_tape.provide(release_views=release_views)
_provide_to_tensor(share_value=share_value, leave_shared=leave_shared, detach_in_place=detach_in_place,
                   note_leaf_write=note_leaf_write)
