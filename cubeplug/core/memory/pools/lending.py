"""What every pool shares: the queue of freed tokens and the usage figures kept up to date."""

from __future__ import annotations

from collections import deque

from cubeplug.core.memory.slice_token import SliceRef
from cubeplug.core.memory.usage import MemoryUsage


class LendingPool:
    """Counters of lent memory, and the deque that weak-reference callbacks append freed tokens to."""

    def __init__(self) -> None:
        self._freed: deque[SliceRef] = deque()
        #: The weak-reference callback: one ``deque.append``, safe from any thread.
        self._on_free = self._freed.append
        self._live = 0
        self._in_use = 0
        self._padding = 0
        self._reserved = 0

    def _drain(self) -> None:
        """Take back the memory whose tokens died (each pool knows how)."""
        raise NotImplementedError

    def usage(self) -> MemoryUsage:
        """Live reservations, their requested bytes, their padding and the bytes of the pool's pages."""
        if self._freed:
            self._drain()
        return MemoryUsage(self._live, self._in_use, self._padding, self._reserved)
