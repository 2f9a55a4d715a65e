"""What every pool shares: the queue of freed records and the usage figures kept up to date."""

from __future__ import annotations

from collections import deque
from typing import Any

from cubeplug.core.memory.usage import MemoryUsage


class LendingPool:
    """Counters of lent memory, and the deque that dying tokens append their pool records to."""

    def __init__(self) -> None:
        self._freed: deque[Any] = deque()
        #: What a token's finalizer calls: one ``deque.append``, safe from any thread.
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
