"""Memory management as in cubecl-runtime (docs/memory.md): pools of pages cut into slices.

A :class:`MemoryManagement` reserves memory for one stream (or device) from a ladder of pools
over one :class:`~cubeplug.core.storage.ComputeStorage`, and hands out :class:`SliceToken`
objects. A slice is free again exactly when its token is garbage.
"""

from __future__ import annotations

from cubeplug.core.memory.limit import MemoryLimit
from cubeplug.core.memory.management import MemoryManagement
from cubeplug.core.memory.options import AllocationMode, PoolOptions, default_pools
from cubeplug.core.memory.slice_token import SliceToken
from cubeplug.core.memory.usage import MemoryUsage, PoolReport

__all__ = [
    "AllocationMode",
    "MemoryLimit",
    "MemoryManagement",
    "MemoryUsage",
    "PoolOptions",
    "PoolReport",
    "SliceToken",
    "default_pools",
]
