"""The ComputeStorage contract: how a backend allocates raw device memory (docs/memory.md).

A storage knows nothing of pools, slices or handles. Memory management asks it for pages with
:meth:`ComputeStorage.alloc`, cuts them into slices, and resolves a slice to a backend resource with
:meth:`ComputeStorage.get`.
"""

from __future__ import annotations

import itertools
from abc import ABC, abstractmethod
from dataclasses import dataclass
from typing import Any

_storage_ids = itertools.count(1)


def next_storage_id() -> int:
    """A process-unique id for a new storage allocation."""
    return next(_storage_ids)


@dataclass(frozen=True, slots=True)
class StorageHandle:
    """A region of one storage allocation: its id, a byte offset and a byte size."""

    id: int
    offset: int
    size: int

    def region(self, offset: int, size: int) -> StorageHandle:
        """The sub-region at ``offset`` (relative to this one) of ``size`` bytes."""
        return StorageHandle(self.id, self.offset + offset, size)


@dataclass(frozen=True, slots=True)
class MemoryProperties:
    """What memory management needs to know of a device: page limits and alignment."""

    max_page_size: int
    alignment: int
    total_memory: int | None = None
    #: The largest reservation the pools cut from a shared page; larger ones get pages of their
    #: own (None: the default ladder's limits). WebGPU sets it (its memory_properties says why).
    max_slice_size: int | None = None


class ComputeStorage(ABC):
    """Raw device allocations: alloc, dealloc (may be deferred), get, flush. Nothing else."""

    #: Byte alignment of every allocation and of every slice the pools cut.
    alignment: int = 256

    @abstractmethod
    def alloc(self, size: int) -> StorageHandle:
        """Allocate ``size`` bytes now; raise OutOfMemoryError if the device has no room."""

    @abstractmethod
    def dealloc(self, id: int) -> None:
        """Release the allocation ``id``; the backend may defer it until :meth:`flush`."""

    @abstractmethod
    def get(self, handle: StorageHandle) -> Any:
        """The backend resource for a region (a pointer, a sub-buffer, a numpy view...)."""

    def flush(self) -> None:  # noqa: B027 - optional hook, empty by default
        """Run deferred deallocations."""

    def memory_info(self) -> tuple[int, int] | None:
        """(free, total) bytes of the device, where the backend knows them."""
        return None
