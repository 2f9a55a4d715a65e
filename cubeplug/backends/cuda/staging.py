"""Pinned (page-locked) host buffers for transfers: a pool with event-ordered reuse.

DMA engines copy between the device and pinned host memory at full link speed and asynchronously;
from pageable memory the driver bounces through its own buffers first. The pool hands out blocks of
power-of-two sizes (:func:`size_class`); a block returned with the event of the copy that uses it
is reused only once that event completed, so a transfer never waits for the host and the host never
overwrites a buffer the device still reads. :class:`PinnedBuffer` is what ``reserve_staging`` gives
users: a numpy array over pinned memory that goes back to the pool when its last view is dropped.
The pool knows nothing of CUDA: the allocator and the events are passed in (tests use fakes).

Reads come back as bytearrays that a copy fills whole, made by ``core.hostmem``'s ``host_buffer``
(uninitialised, advised for transparent huge pages when large) or ``host_copy``; :func:`plan_chunks` splits a
staged read into chunks and :func:`drain_chunks` copies each chunk out once its copy completed.
"""

from __future__ import annotations

import bisect
import ctypes
import threading
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from cubeplug.core.hostmem import host_buffer, host_copy

#: Smallest block handed out (a page).
MIN_BLOCK = 4096


class Event(Protocol):
    """What the pool needs of an event: whether it completed, and a way to wait for it."""

    @property
    def done(self) -> bool:
        """True once the work before the event completed."""

    def synchronize(self) -> None:
        """Block until the event completed."""


def size_class(size: int) -> int:
    """The block size serving a request of ``size`` bytes: a power of two, at least :data:`MIN_BLOCK`."""
    return max(MIN_BLOCK, 1 << (max(1, size) - 1).bit_length())


class PinnedBlock:
    """One pinned allocation: its address, its byte size and a uint8 numpy view of it."""

    __slots__ = ("array", "ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size
        self.array: np.ndarray = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(ptr))


class PinnedPool:
    """Pinned blocks by size class, reused after the event of their last copy; thread-safe."""

    def __init__(
        self,
        host_alloc: Callable[[int], int],
        host_free: Callable[[int], None],
        max_bytes: int = 256 << 20,
    ) -> None:
        self._alloc = host_alloc
        self._free_fn = host_free
        self.max_bytes = max_bytes
        # Re-entrant: a PinnedBuffer collected by the garbage collector inside a locked section gives
        # its block back from the same thread.
        self._lock = threading.RLock()
        self._idle: dict[int, deque[tuple[PinnedBlock, Event | None]]] = {}
        self._blocks: dict[int, PinnedBlock] = {}
        self._starts: list[int] = []
        #: Bytes of pinned memory allocated and not yet freed.
        self.reserved = 0

    def take(self, size: int) -> PinnedBlock:
        """A block of at least ``size`` bytes whose previous copies completed."""
        cls = size_class(size)
        wait: Event | None = None
        with self._lock:
            queue = self._idle.get(cls)
            if queue:
                block, event = queue[0]
                if event is None or event.done:
                    queue.popleft()
                    return block
                if self.reserved + cls > self.max_bytes:
                    queue.popleft()
                    wait = event
        if wait is not None:
            wait.synchronize()
            return block
        return self._new_block(cls)

    def give(self, block: PinnedBlock, event: Event | None = None) -> None:
        """Return a block; it is reused once ``event`` (the last copy using it) completed."""
        with self._lock:
            self._idle.setdefault(block.size, deque()).append((block, event))

    def allocate(self, size: int) -> PinnedBlock:
        """A block of exactly ``size`` bytes outside the size classes (freed with :meth:`release`)."""
        return self._new_block(max(1, size))

    def release(self, block: PinnedBlock) -> None:
        """Free a block now (the caller knows no copy uses it)."""
        with self._lock:
            if self._blocks.pop(block.ptr, None) is None:
                return
            self._starts.remove(block.ptr)
            self.reserved -= block.size
        self._free_fn(block.ptr)

    def _new_block(self, size: int) -> PinnedBlock:
        ptr = self._alloc(size)
        block = PinnedBlock(ptr, size)
        with self._lock:
            self._blocks[ptr] = block
            bisect.insort(self._starts, ptr)
            self.reserved += size
        return block

    def contains(self, address: int, nbytes: int) -> bool:
        """True when ``[address, address + nbytes)`` lies in one live pinned block of this pool."""
        with self._lock:
            i = bisect.bisect_right(self._starts, address) - 1
            if i < 0:
                return False
            block = self._blocks[self._starts[i]]
            return address + nbytes <= block.ptr + block.size

    def trim(self) -> int:
        """Free every idle block whose last copy completed; returns the bytes freed."""
        freed: list[PinnedBlock] = []
        with self._lock:
            for queue in self._idle.values():
                keep = deque((b, e) for b, e in queue if not (e is None or e.done))
                freed.extend(b for b, e in queue if e is None or e.done)
                queue.clear()
                queue.extend(keep)
        for block in freed:
            self.release(block)
        return sum(b.size for b in freed)

    def close(self) -> None:
        """Wait for in-flight copies and free every block of the pool."""
        with self._lock:
            pending = [e for q in self._idle.values() for _, e in q if e is not None]
            self._idle.clear()
            blocks = list(self._blocks.values())
        for event in pending:
            event.synchronize()
        for block in blocks:
            self.release(block)

    def idle_bytes(self) -> int:
        """Bytes held in idle blocks (cached for reuse)."""
        with self._lock:
            return sum(b.size for q in self._idle.values() for b, _ in q)


class PinnedBuffer:
    """Pinned memory lent to a user as a numpy array; it returns to the pool when the array dies."""

    __slots__ = ("__array_interface__", "__weakref__", "_block", "_pool", "_pooled")

    def __init__(self, pool: PinnedPool, size: int) -> None:
        self._pool = pool
        self._pooled = size <= pool.max_bytes // 4
        self._block = pool.take(size) if self._pooled else pool.allocate(size)
        self.__array_interface__ = {
            "data": (self._block.ptr, False),
            "shape": (size,),
            "typestr": "|u1",
            "version": 3,
        }

    def array(self) -> np.ndarray:
        """A uint8 numpy array over the buffer that keeps it alive."""
        return np.asarray(self)

    def __del__(self) -> None:
        try:
            if self._pooled:
                self._pool.give(self._block)
            else:
                self._pool.release(self._block)
        except Exception:  # interpreter shutdown: the process frees pinned memory anyway
            pass


# ---------------------------------------------------------------------------- staged reads
class Piece(NamedTuple):
    """Bytes ``[at, at + nbytes)`` of result ``item``, at offset ``into`` of a chunk."""

    item: int
    at: int
    into: int
    nbytes: int


def plan_chunks(sizes: Sequence[int], chunk: int) -> list[tuple[int, list[Piece]]]:
    """Split results of ``sizes`` bytes, laid end to end, into chunks of at most ``chunk`` bytes.

    Returns ``(chunk bytes, pieces)`` per chunk; empty results have no piece.
    """
    chunk = max(1, chunk)
    plan: list[tuple[int, list[Piece]]] = []
    pieces: list[Piece] = []
    used = 0
    for item, size in enumerate(sizes):
        at = 0
        while at < size:
            n = min(size - at, chunk - used)
            pieces.append(Piece(item, at, used, n))
            at += n
            used += n
            if used == chunk:
                plan.append((used, pieces))
                pieces, used = [], 0
    if pieces:
        plan.append((used, pieces))
    return plan


class StagedChunk(NamedTuple):
    """A pinned block that queued copies fill, and the event recorded after them."""

    block: PinnedBlock
    pieces: list[Piece]
    event: Any


def drain_chunks(
    chunks: Sequence[StagedChunk],
    sizes: Sequence[int],
    wait: Callable[[Any], None],
    give: Callable[[PinnedBlock], None],
) -> list[bytearray]:
    """Copy staged chunks into one bytearray per result, each chunk once its event completed.

    Every byte is copied once, from the pinned block into its result (no fill, no intermediate);
    a chunk is given back as soon as it was copied out, so the host copy of one chunk overlaps the
    device's copy of the next. The first event was waited for by the caller (the future); a chunk
    whose wait failed, and those after it, stay out of the pool (the pool frees them when it closes).
    """
    outs: list[bytearray | None] = [bytearray() if n == 0 else None for n in sizes]
    for k, chunk in enumerate(chunks):
        if k:
            wait(chunk.event)
        array = chunk.block.array
        for item, at, into, n in chunk.pieces:
            src = array[into : into + n]
            if n == sizes[item]:
                outs[item] = host_copy(src)
                continue
            out = outs[item]
            if out is None:
                out = outs[item] = host_buffer(sizes[item])
            np.frombuffer(out, dtype=np.uint8)[at : at + n] = src
        give(chunk.block)
    return outs  # type: ignore[return-value]
