"""Ops that move values between storage rather than compute: loads and dtype casts.

``load`` copies a leaf, a constant or another tape's tensor into the arena when it is
first used on a tape (a snapshot, so a later in-place change of the source cannot alter
what the graph computed).  Its backward is done by the engine: the adjoint stays in the
arena and is accumulated into the leaf's ``.grad``.

``cast`` converts between the float32 and float64 arenas; the engine runs it between the
per-dtype compiled segments.
"""
from tapejit.registry import define_special

LOAD = define_special("load", "AccumulateGrad", "load")
CAST = define_special("cast", "ToCopyBackward0", "cast")
