"""Pinned (page-locked) host buffers for transfers: the toolkit's staging pool with event-ordered reuse.

DMA engines copy between the device and pinned host memory at full link speed and asynchronously;
from pageable memory the driver bounces through its own buffers first. :class:`PinnedPool` is the
toolkit's :class:`~cubeplug.plugin.StagingPool` over pinned blocks of power-of-two sizes
(:func:`~cubeplug.plugin.size_class`); a block returned with the event of the copy that uses it
is reused only once that event completed, so a transfer never waits for the host and the host never
overwrites a buffer the device still reads. :class:`PinnedBuffer` is what ``reserve_staging`` gives
users: a numpy array over pinned memory that goes back to the pool when its last view is dropped.
The pool knows nothing of CUDA: the allocator and the events are passed in (tests use fakes).

Reads come back as bytearrays that a copy fills whole, made by the toolkit's ``host_buffer``
(uninitialised, advised for transparent huge pages when large) or ``host_copy``; :func:`plan_chunks` splits a
staged read into chunks and :func:`drain_chunks` copies each chunk out once its copy completed.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import numpy as np

from cubeplug.plugin import MIN_BLOCK, StagingPool, host_buffer, host_copy, size_class

__all__ = ["MIN_BLOCK", "PinnedBlock", "PinnedBuffer", "PinnedPool", "size_class"]


class Event(Protocol):
    """What the pool needs of an event: whether it completed, and a way to wait for it."""

    @property
    def done(self) -> bool:
        """True once the work before the event completed."""

    def synchronize(self) -> None:
        """Block until the event completed."""


class PinnedBlock:
    """One pinned allocation: its address, its byte size and a uint8 numpy view of it; while idle in
    the pool, the event of its last copy."""

    __slots__ = ("array", "event", "ptr", "size")

    def __init__(self, ptr: int, size: int) -> None:
        self.ptr = ptr
        self.size = size
        self.array: np.ndarray = np.ctypeslib.as_array((ctypes.c_ubyte * size).from_address(ptr))
        self.event: Event | None = None


class PinnedPool(StagingPool[PinnedBlock]):
    """Pinned blocks by size class, reused after the event of their last copy; thread-safe.

    Every block given back is kept (``max_bytes`` bounds what is allocated: past it, :meth:`take`
    waits for the oldest block of the class instead of allocating); :meth:`trim` frees the idle
    ones. Every live block is registered by address, for :meth:`contains`.
    """

    # The oldest block of a class is the one whose last copy completes first.
    oldest_first = True

    def __init__(
        self,
        host_alloc: Callable[[int], int],
        host_free: Callable[[int], None],
        max_bytes: int = 256 << 20,
    ) -> None:
        super().__init__(MIN_BLOCK)
        self._alloc = host_alloc
        self._free_fn = host_free
        self.max_bytes = max_bytes
        #: Bytes of pinned memory allocated and not yet freed.
        self.reserved = 0

    def take(self, size: int) -> PinnedBlock:
        """A block of at least ``size`` bytes whose previous copies completed."""
        cls = size_class(size)
        wait: Event | None = None
        with self._lock:
            queue = self._free.get(cls)
            if queue:
                block = queue[0]
                event = block.event
                ready = event is None or event.done
                if ready or self.reserved + cls > self.max_bytes:
                    queue.popleft()
                    self._idle -= cls
                    block.event = None
                    if ready:
                        return block
                    wait = event
        if wait is not None:
            wait.synchronize()
            return block
        return self._new_block(cls)

    def give(self, block: PinnedBlock, event: Event | None = None) -> None:
        """Return a block; it is reused once ``event`` (the last copy using it) completed."""
        block.event = event
        self.keep_idle(block, block.size)

    def allocate(self, size: int) -> PinnedBlock:
        """A block of exactly ``size`` bytes outside the size classes (freed with :meth:`release`)."""
        return self._new_block(max(1, size))

    def release(self, block: PinnedBlock) -> None:
        """Free a block now (the caller knows no copy uses it)."""
        with self._lock:
            if not self.unregister(block.ptr, block):
                return
            self.reserved -= block.size
        self._free_fn(block.ptr)

    def _new_block(self, size: int) -> PinnedBlock:
        ptr = self._alloc(size)
        block = PinnedBlock(ptr, size)
        with self._lock:
            self.register(ptr, ptr + size, block)
            self.reserved += size
        return block

    def contains(self, address: int, nbytes: int) -> bool:
        """True when ``[address, address + nbytes)`` lies in one live pinned block of this pool."""
        return self.owner_of(address, nbytes) is not None

    def trim(self) -> int:
        """Free every idle block whose last copy completed; returns the bytes freed."""
        freed: list[PinnedBlock] = []
        with self._lock:
            for size, queue in self._free.items():
                busy: list[PinnedBlock] = []
                for block in queue:
                    event = block.event
                    (freed if event is None or event.done else busy).append(block)
                self._idle -= size * (len(queue) - len(busy))
                queue.clear()
                queue.extend(busy)
        for block in freed:
            self.release(block)
        return sum(b.size for b in freed)

    def close(self) -> None:
        """Wait for in-flight copies and free every block of the pool."""
        idle = self.drain()
        pending = [b.event for b in idle if b.event is not None]
        blocks = self.owners()
        for event in pending:
            event.synchronize()
        for block in blocks:
            self.release(block)


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
