"""A stand-in for ``cupy.cuda.nccl`` over the fake runtime's host memory, for the NCCL wiring tests.

Communicators of one ``initAll`` share a world; each call records (send, recv, count, type, op, root)
per rank, and the last rank of a round does the collective with numpy on every rank's memory (the
fake runtime runs everything at once, and cubeplug returns from a collective only once every rank
made its call, so no rank reads before the round ran).
"""

from __future__ import annotations

import ctypes
import sys
import threading
import types
from typing import Any

import numpy as np

TYPES = {0: np.int8, 1: np.uint8, 2: np.int32, 3: np.uint32, 4: np.int64, 5: np.uint64, 6: np.float16,
         7: np.float32, 8: np.float64}  # fmt: skip
OPS = {0: np.add, 1: np.multiply, 2: np.maximum, 3: np.minimum}


def _array(ptr: int, count: int, dtype: Any) -> np.ndarray:
    nbytes = count * np.dtype(dtype).itemsize
    return np.frombuffer((ctypes.c_char * nbytes).from_address(ptr), dtype=dtype)


#: (what, thread id) of every NCCL call and groupStart/groupEnd, in order (install clears it).
LOG: list[tuple[str, int]] = []


class World:
    def __init__(self, size: int) -> None:
        self.size = size
        self.lock = threading.Lock()
        self.pending: dict[int, tuple[Any, ...]] = {}
        self.calls: list[str] = []

    def call(self, rank: int, record: tuple[Any, ...]) -> None:
        LOG.append((record[0], threading.get_ident()))
        with self.lock:
            assert rank not in self.pending, "a rank called twice in one round"
            self.pending[rank] = record
            if len(self.pending) < self.size:
                return
            rounds, self.pending = self.pending, {}
            kinds = {r[0] for r in rounds.values()}
            assert len(kinds) == 1, kinds
            self.calls.append(next(iter(kinds)))
            self._run([rounds[r] for r in range(self.size)])

    def _run(self, calls: list[tuple[Any, ...]]) -> None:
        kind = calls[0][0]
        n, dtype = calls[0][3], TYPES[calls[0][4]]
        if kind == "allReduce":
            parts = [_array(c[1], n, dtype).copy() for c in calls]
            acc = parts[0]
            for p in parts[1:]:
                acc = OPS[calls[0][5]](acc, p)
            for c in calls:
                _array(c[2], n, dtype)[:] = acc
        elif kind == "broadcast":
            data = _array(calls[calls[0][5]][1], n, dtype).copy()
            for c in calls:
                _array(c[2], n, dtype)[:] = data
        elif kind == "allGather":
            data = np.concatenate([_array(c[1], n, dtype) for c in calls])
            for c in calls:
                _array(c[2], n * self.size, dtype)[:] = data
        else:  # reduceScatter: n is the receive count
            parts = [_array(c[1], n * self.size, dtype).copy() for c in calls]
            acc = parts[0]
            for p in parts[1:]:
                acc = OPS[calls[0][5]](acc, p)
            for r, c in enumerate(calls):
                _array(c[2], n, dtype)[:] = acc[r * n : (r + 1) * n]


class NcclCommunicator:
    worlds: list[World] = []
    all: list[NcclCommunicator] = []

    def __init__(self, world: World, rank: int) -> None:
        self.world, self.rank = world, rank
        self.destroyed = False
        NcclCommunicator.all.append(self)

    def destroy(self) -> None:
        self.destroyed = True

    @staticmethod
    def initAll(devices: list[int]) -> list[NcclCommunicator]:
        world = World(len(devices))
        NcclCommunicator.worlds.append(world)
        return [NcclCommunicator(world, r) for r in range(len(devices))]

    def allReduce(self, send: int, recv: int, count: int, dtype: int, op: int, stream: int) -> None:
        self.world.call(self.rank, ("allReduce", send, recv, count, dtype, op))

    def broadcast(self, send: int, recv: int, count: int, dtype: int, root: int, stream: int) -> None:
        self.world.call(self.rank, ("broadcast", send, recv, count, dtype, root))

    def allGather(self, send: int, recv: int, count: int, dtype: int, stream: int) -> None:
        self.world.call(self.rank, ("allGather", send, recv, count, dtype, None))

    def reduceScatter(self, send: int, recv: int, count: int, dtype: int, op: int, stream: int) -> None:
        self.world.call(self.rank, ("reduceScatter", send, recv, count, dtype, op))


def install(monkeypatch: Any) -> types.ModuleType:
    """``cupy.cuda.nccl`` as this fake (after ``fake_cupy.install``)."""
    nccl = types.ModuleType("cupy.cuda.nccl")
    names = ["INT8", "UINT8", "INT32", "UINT32", "INT64", "UINT64", "FLOAT16", "FLOAT32", "FLOAT64"]
    for code, name in enumerate(names):
        setattr(nccl, f"NCCL_{name}", code)
    for code, name in enumerate(["SUM", "PROD", "MAX", "MIN"]):
        setattr(nccl, f"NCCL_{name}", code)
    nccl.NcclCommunicator = NcclCommunicator  # type: ignore[attr-defined]
    nccl.available = True  # type: ignore[attr-defined]
    nccl.groupStart = lambda: LOG.append(("groupStart", threading.get_ident()))  # type: ignore[attr-defined]
    nccl.groupEnd = lambda: LOG.append(("groupEnd", threading.get_ident()))  # type: ignore[attr-defined]
    LOG.clear()
    NcclCommunicator.worlds = []
    NcclCommunicator.all = []
    monkeypatch.setitem(sys.modules, "cupy.cuda.nccl", nccl)
    monkeypatch.setattr(sys.modules["cupy.cuda"], "nccl", nccl, raising=False)
    return nccl
