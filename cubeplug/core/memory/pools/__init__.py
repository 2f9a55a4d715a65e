"""Memory pools: sliced pages, exclusive pages and persistent exact-size buckets.

Every pool lends :class:`~cubeplug.core.memory.slice_token.SliceToken` objects and keeps no
reference to them; see :mod:`cubeplug.core.memory.slice_token` for how frees are detected.
A pool is driven by one thread at a time (its memory management's owner holds a lock); only the
tokens' finalizers, a single ``deque.append`` each, run elsewhere.
"""

from __future__ import annotations

from typing import Protocol

from cubeplug.core.memory.pools.exclusive import ExclusivePool
from cubeplug.core.memory.pools.persistent import PersistentPool
from cubeplug.core.memory.pools.sliced import SlicedPool
from cubeplug.core.memory.slice_token import SliceToken
from cubeplug.core.memory.usage import MemoryUsage, PoolReport


class MemoryPool(Protocol):
    """What memory management asks of a pool."""

    def accepts(self, size: int) -> bool:
        """True if the pool takes a reservation of ``size`` bytes."""

    def try_reserve(self, size: int) -> SliceToken | None:
        """A token for free memory the pool already holds, or None."""

    def alloc(self, size: int) -> SliceToken | None:
        """A token on a new page; None when the pool is capped and full (OutOfMemoryError: no room)."""

    def cleanup(self, explicit: bool) -> int:
        """Free what the pool's policy allows (explicit: every fully free page); the bytes freed."""

    def usage(self) -> MemoryUsage:
        """Live slices, their bytes, padding and the bytes of the pool's pages."""

    def report(self) -> PoolReport:
        """The pool's shape and figures."""


__all__ = ["ExclusivePool", "MemoryPool", "PersistentPool", "SlicedPool"]
