"""Host staging memory: blocks by power-of-two size class, kept idle for reuse (docs/plugins.md).

Every backend that moves bytes between the host and a device stages them in host memory that the
device can reach quickly (pinned, mapped or mappable), and keeps the idle blocks for the next
transfer: allocating such memory costs far more than a transfer. :class:`StagingPool` is that
pool, once: size classes, idle blocks per class under a lock, the limits on what is kept, and a
registry of the host address ranges a pool handed out (so that a transfer can tell a staging
buffer from any other host memory). A backend subclass says how a block is made, when an idle one
may be reused and what a user gets: the CUDA backend's pinned blocks are reused once the event of
their last copy completed, OpenCL's mapped chunks come back when the last reference to them is
dropped, WebGPU's mappable buffers when a read-back has unmapped them.
"""

from __future__ import annotations

import bisect
import threading
from collections import deque
from typing import Any, Generic, TypeVar

#: Smallest block of the default size classes (a page).
MIN_BLOCK = 4096

B = TypeVar("B")


def size_class(nbytes: int, minimum: int = MIN_BLOCK) -> int:
    """The block size serving ``nbytes``: a power of two, at least ``minimum``."""
    return max(minimum, 1 << (max(1, nbytes) - 1).bit_length())


class StagingPool(Generic[B]):
    """Idle staging blocks by size class, handed out again before new ones are made; thread-safe.

    ``keep`` caps the bytes kept idle (None: no cap), ``keep_per_class`` the idle blocks of one
    class, ``largest_kept`` the largest class kept at all; :meth:`keep_idle` refuses a block beyond
    them and its caller releases it. Idle blocks are reused newest first (the memory most likely
    still in the host's caches) unless the subclass sets :attr:`oldest_first` (blocks that wait
    for an event: the oldest completes first).
    """

    #: Reuse the oldest idle block of a class first instead of the newest.
    oldest_first = False

    def __init__(
        self,
        minimum: int = MIN_BLOCK,
        *,
        keep: int | None = None,
        keep_per_class: int | None = None,
        largest_kept: int | None = None,
    ) -> None:
        #: The smallest size class.
        self.minimum = minimum
        #: Bytes of idle blocks kept at most (None: every block given back is kept).
        self.keep = keep
        self.keep_per_class = keep_per_class
        self.largest_kept = largest_kept
        # Re-entrant: a block collected by the garbage collector inside a locked section may come
        # back (keep_idle, unregister) on the same thread.
        self._lock = threading.RLock()
        #: Idle blocks by size class.
        self._free: dict[int, deque[B]] = {}
        #: Bytes held in idle blocks.
        self._idle = 0
        #: Host ranges handed out: their start addresses, sorted, and start -> (end, owner).
        self._starts: list[int] = []
        self._lent: dict[int, tuple[int, Any]] = {}

    def size_class(self, nbytes: int) -> int:
        """The class (block size) that serves ``nbytes``."""
        return size_class(nbytes, self.minimum)

    # ------------------------------------------------------------------ idle blocks
    def reuse(self, size: int) -> B | None:
        """An idle block of class ``size`` taken off the pool, or None when it has none."""
        free = self._free.get(size)
        if free:
            with self._lock:
                if free:
                    block = free.popleft() if self.oldest_first else free.pop()
                    self._idle -= size
                    return block
        return None

    def keep_idle(self, block: B, size: int) -> bool:
        """Keep ``block`` (of class ``size``) for reuse; False when the limits refuse it (the caller
        then releases it)."""
        if self.largest_kept is not None and size > self.largest_kept:
            return False
        with self._lock:
            keep = self.keep
            if keep is not None and self._idle + size > keep:
                return False
            free = self._free.get(size)
            if free is None:
                free = self._free[size] = deque()
            elif self.keep_per_class is not None and len(free) >= self.keep_per_class:
                return False
            free.append(block)
            self._idle += size
            return True

    def drain(self) -> list[B]:
        """Forget every idle block and return them, for the caller to release."""
        with self._lock:
            blocks = [block for free in self._free.values() for block in free]
            self._free.clear()
            self._idle = 0
        return blocks

    def idle_bytes(self) -> int:
        """Bytes held in idle blocks (kept for reuse)."""
        return self._idle

    # ------------------------------------------------------------------ host ranges handed out
    def register(self, start: int, end: int, owner: Any) -> None:
        """Record that ``[start, end)`` of host memory was handed out, on behalf of ``owner``."""
        with self._lock:
            if self._lent.get(start) is None:
                bisect.insort(self._starts, start)
            self._lent[start] = (end, owner)

    def unregister(self, start: int, owner: Any = None) -> bool:
        """Forget the range at ``start`` (only if ``owner`` registered it, when given); True if it was."""
        with self._lock:
            entry = self._lent.get(start)
            if entry is None or (owner is not None and entry[1] is not owner):
                return False
            del self._lent[start]
            del self._starts[bisect.bisect_left(self._starts, start)]
            return True

    def owner_of(self, address: int, nbytes: int) -> Any:
        """The owner of the registered range holding ``[address, address + nbytes)``, or None."""
        if not self._starts:
            return None
        with self._lock:
            starts = self._starts
            i = bisect.bisect_right(starts, address) - 1
            entry = self._lent.get(starts[i]) if i >= 0 else None
        if entry is None or address + nbytes > entry[0]:
            return None
        return entry[1]

    def owners(self) -> list[Any]:
        """The owner of every registered range."""
        with self._lock:
            return [owner for _, owner in self._lent.values()]
