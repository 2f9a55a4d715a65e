"""Memory figures: what a memory management or one of its pools holds."""

from __future__ import annotations

from dataclasses import dataclass

_UNITS = ("B", "KiB", "MiB", "GiB", "TiB")


def format_bytes(n: int) -> str:
    """``n`` bytes in the largest binary unit that keeps the number at least 1 (``1.50 MiB``)."""
    value = float(n)
    for unit in _UNITS:
        if abs(value) < 1024 or unit == _UNITS[-1]:
            return f"{n} B" if unit == "B" else f"{value:.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")  # pragma: no cover


@dataclass(frozen=True, slots=True)
class MemoryUsage:
    """Live allocations, bytes they use, padding added by alignment, bytes reserved from the device."""

    number_allocs: int
    bytes_in_use: int
    bytes_padding: int
    bytes_reserved: int

    def __add__(self, other: MemoryUsage) -> MemoryUsage:
        if not isinstance(other, MemoryUsage):
            return NotImplemented
        return MemoryUsage(
            self.number_allocs + other.number_allocs,
            self.bytes_in_use + other.bytes_in_use,
            self.bytes_padding + other.bytes_padding,
            self.bytes_reserved + other.bytes_reserved,
        )

    def __str__(self) -> str:
        used = self.bytes_in_use + self.bytes_padding
        share = f" ({100 * used / self.bytes_reserved:.1f} % used)" if self.bytes_reserved else ""
        plural = "" if self.number_allocs == 1 else "s"
        return (
            f"{self.number_allocs} allocation{plural}, {format_bytes(self.bytes_in_use)} in use "
            f"(+{format_bytes(self.bytes_padding)} padding), {format_bytes(self.bytes_reserved)} "
            f"reserved{share}"
        )


@dataclass(frozen=True, slots=True)
class PoolReport:
    """One pool: kind, page size (sliced) and largest slice, pages, live slices, bytes in use and reserved."""

    kind: str
    page_size: int | None
    max_slice_size: int
    pages: int
    slices: int
    in_use: int
    reserved: int

    def __str__(self) -> str:
        shape = (
            f"pages of {format_bytes(self.page_size)}, slices up to {format_bytes(self.max_slice_size)}"
            if self.page_size is not None
            else f"allocations up to {format_bytes(self.max_slice_size)}"
        )
        return (
            f"{self.kind} pool ({shape}): {self.pages} page{'' if self.pages == 1 else 's'}, "
            f"{self.slices} live slice{'' if self.slices == 1 else 's'}, {format_bytes(self.in_use)} in use, "
            f"{format_bytes(self.reserved)} reserved"
        )
