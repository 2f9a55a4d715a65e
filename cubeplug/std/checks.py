"""Argument checks and launch sizes shared by the standard kernels.

Every std op validates its arguments once, in Python, with errors that name the argument and the
fix, and then launches unchecked: the launch path does no second validation.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import CubeCount
from cubeplug.core.server import ComputeServer

#: Most cubes a std launch uses along x (WebGPU allows 65535 per dimension); kernels loop over the rest.
MAX_GROUPS = 65535
#: Most elements one unit folds in a loop: lavapipe ends a shader loop after 65535 iterations,
#: silently, so a kernel whose units would loop longer takes more cubes.
MAX_PER_UNIT = 32768
#: Largest element count one std call takes (indices are 32-bit on every backend).
MAX_ELEMENTS = (1 << 31) - 1


def count(n: Any, what: str = "n", limit: int = MAX_ELEMENTS) -> int:
    """``n`` as an int in ``0..limit``, else ValidationError."""
    if type(n) is int and 0 <= n <= limit:  # the common case first (std's elementwise calls are hot)
        return n
    if isinstance(n, bool) or not isinstance(n, (int, np.integer)):
        raise ValidationError(f"{what} must be an int element count, got {type(n).__name__} {n!r}")
    value = int(n)
    if value < 0:
        raise ValidationError(f"{what} must be >= 0, got {value}")
    if value > limit:
        raise ValidationError(
            f"{what} = {value} exceeds {limit} elements per call; split the work into views "
            f"(handle.offset_start / offset_end) of at most {limit} elements"
        )
    return value


def buffer(client: Any, handle: Any, nbytes: int, what: str) -> Handle:
    """``handle`` if it is a live handle of ``client`` holding at least ``nbytes``, else ValidationError."""
    server: ComputeServer = client.server
    align = server.capabilities.offset_alignment
    # The common case in one test (std's elementwise calls are hot); anything else is checked
    # below, step by step, for the error that says what is wrong.
    if (server.is_live_handle(handle) and handle.nbytes - handle.start - handle.end >= nbytes
            and (align <= 1 or not handle.start % align)):
        return handle
    live = server.check_handle(handle, what)
    if live.size < nbytes:
        raise ValidationError(
            f"{what} holds {live.size} B but the call needs {nbytes} B; "
            f"pass a larger handle or a smaller count"
        )
    if align > 1 and live.start % align:
        raise ValidationError(
            f"{what} is a view at byte offset {live.start}; {client.backend} binds views at offsets "
            f"aligned to {align} B"
        )
    return live


def vector_ok(handle: Handle, n: int) -> bool:
    """True when ``handle`` can be read as float4 vectors (16-byte aligned view, at least 4 elements)."""
    return n >= 4 and handle.start % 16 == 0


def prefix(handle: Handle, nbytes: int) -> Handle:
    """A view of the first ``nbytes`` of ``handle`` (the handle itself when it is exactly that long)."""
    extra = handle.size - nbytes
    return handle if extra == 0 else handle.offset_end(extra)


def groups(items: int, per_group: int, cap: int = MAX_GROUPS) -> int:
    """Cubes needed for ``items`` at ``per_group`` each, between 1 and ``cap``."""
    return max(1, min(cap, -(-items // per_group)))


def capped_groups(items: int, per_group: int, most: int, units: int) -> int:
    """Cubes for ``items`` at ``per_group`` each (a grid-stride loop over the rest), at most ``most``
    (a wave of the device, say) unless that many would leave each of a cube's ``units`` units more
    than :data:`MAX_PER_UNIT` items to loop over (lavapipe's loop limit)."""
    return min(groups(items, per_group), max(most, groups(items, units * MAX_PER_UNIT)))


def cube_count(cubes: int) -> CubeCount:
    """A count of ``cubes`` cubes, one per line or block: along x, and along y as well beyond
    :data:`MAX_GROUPS` (the kernels take the cube's linear position, ``CUBE_POS_Y * CUBE_COUNT_X +
    CUBE_POS_X``, as its index and skip the extra ones)."""
    if cubes <= MAX_GROUPS:
        return CubeCount(cubes)
    return CubeCount(MAX_GROUPS, -(-cubes // MAX_GROUPS))
