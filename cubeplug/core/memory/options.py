"""Pool options, the default ladder of pools and the allocation modes."""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Literal

from cubeplug.core.errors import ValidationError

MiB = 1 << 20


class AllocationMode(enum.Enum):
    """Where reservations go: the pool ladder (AUTO) or exact-size persistent buckets (PERSISTENT)."""

    AUTO = "auto"
    PERSISTENT = "persistent"


@dataclass(frozen=True, slots=True)
class PoolOptions:
    """One pool of the ladder: sliced pages of ``page_size`` or exclusive pages, up to ``max_slice_size``."""

    kind: Literal["sliced", "exclusive"]
    #: Largest reservation the pool takes (sliced pools also take sizes within 20 % of a page).
    max_slice_size: int
    #: Size of each page (sliced pools only; exclusive pages are sized per reservation).
    page_size: int = 0
    #: At most this many pages (None: no cap); a full capped pool spills to the next pool.
    max_pages: int | None = None
    #: Whether a sliced pool also takes sizes within 20 % of a page (above ``max_slice_size``).
    near_full: bool = True

    def __post_init__(self) -> None:
        if self.kind not in ("sliced", "exclusive"):
            raise ValidationError(f"pool kind is 'sliced' or 'exclusive', got {self.kind!r}")
        if self.max_slice_size < 0 or self.page_size < 0:
            raise ValidationError(f"pool sizes are non-negative, got {self}")
        if self.kind == "sliced" and not 0 < self.max_slice_size <= self.page_size:
            raise ValidationError(f"a sliced pool needs 0 < max_slice_size <= page_size, got {self}")
        if self.max_pages is not None and self.max_pages < 1:
            raise ValidationError(f"max_pages is at least 1 (or None), got {self.max_pages}")

    @classmethod
    def sliced(
        cls, page_size: int, max_slice_size: int, max_pages: int | None = None, near_full: bool = True
    ) -> PoolOptions:
        """A pool cutting pages of ``page_size`` into slices of at most ``max_slice_size`` (and, if
        ``near_full``, of sizes that leave less than 20 % of a page unused)."""
        return cls("sliced", max_slice_size, page_size, max_pages, near_full)

    @classmethod
    def exclusive(cls, max_alloc_size: int, max_pages: int | None = None) -> PoolOptions:
        """A pool giving each reservation of at most ``max_alloc_size`` its own page."""
        return cls("exclusive", max_alloc_size, 0, max_pages)

    def accepts(self, size: int) -> bool:
        """True if this pool takes a reservation of ``size`` bytes."""
        if self.kind == "sliced":
            return slice_fits(size, self.max_slice_size, self.page_size, self.near_full)
        return size <= self.max_slice_size


def slice_fits(size: int, max_slice_size: int, page_size: int, near_full: bool) -> bool:
    """Whether a sliced pool takes ``size`` bytes: up to its largest slice, and (``near_full``)
    sizes that leave less than 20 % of a page unused (CubeCL's rule)."""
    if size <= max_slice_size:
        return True
    return near_full and size <= page_size and (page_size - size) * 5 < page_size


def default_pools(
    max_page_size: int, alignment: int, max_slice_size: int | None = None
) -> list[PoolOptions]:
    """CubeCL's ladder: a zero-size exclusive pool, sliced pools from small to large, an exclusive tail.

    With ``max_slice_size``, no sliced pool takes a larger reservation (nor one near a page's size
    above it): those get pages of their own from the tail, and pools it leaves with nothing to take
    are dropped.
    """
    if max_slice_size is not None and max_slice_size < 1:
        raise ValidationError(f"max_slice_size is a positive byte count (or None), got {max_slice_size}")
    align = max(1, alignment)
    page_sizes: list[int] = []
    current = max_page_size
    while current >= 32 * MiB:
        current //= 4
        current = -(-current // align) * align
        page_sizes.append(current)
    pools = [PoolOptions.exclusive(0)]
    # The k-th page size (k from 1, largest first) gets slices of at most page / 2**k.
    sliced = [PoolOptions.sliced(page, page // 2**k) for k, page in enumerate(page_sizes, start=1)]
    if max_slice_size is not None:
        capped: list[PoolOptions] = []
        for o in reversed(sliced):  # smallest first
            most = min(o.max_slice_size, max_slice_size)
            if not capped or most > capped[-1].max_slice_size:
                capped.append(PoolOptions.sliced(o.page_size, most, near_full=o.page_size <= max_slice_size))
        sliced = capped[::-1]
    pools.extend(reversed(sliced))
    pools.append(PoolOptions.exclusive(max_page_size))
    return pools
