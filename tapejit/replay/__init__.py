"""Replay: ``tj.compile`` traces a function once and replays its tape in Numba.

``trace.py`` records the first call and refuses what a replay could not repeat,
``frozen.py`` cuts the tape down and replays it, ``compiled.py`` is the public object
(signatures, arguments, results) and ``batch.py`` replays over a batch axis in parallel.
"""
from tapejit.replay.compiled import Compiled, compile  # noqa: A004
from tapejit.replay.trace import CompileError

__all__ = ["Compiled", "CompileError", "compile"]
