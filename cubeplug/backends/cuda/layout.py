"""Pitched tensor layouts, as CubeCL's ``PitchedMemoryLayoutPolicy`` lays them out.

A tensor of rank >= 2 keeps its last dimension contiguous but pads each row to a pitch: the row's
byte width rounded up to its "optimal alignment", the next power of two of the width clamped to
``[16, max_align]`` (a row of one element is not padded). Dimensions above the rows are contiguous
over the pitched rows, so a whole tensor is ``height`` rows of ``pitch`` bytes and moves with one
2-D copy (``cudaMemcpy2DAsync``). Strides are in elements, as cubeplug's Tensor keeps them.
"""

from __future__ import annotations

from dataclasses import dataclass


def optimal_row_align(width: int, itemsize: int, max_align: int) -> int:
    """Byte alignment of a row of ``width`` elements: next power of two of its bytes in [16, max_align]."""
    if width == 1:
        return itemsize
    nbytes = max(1, width * itemsize)
    pow2 = 1 << (nbytes - 1).bit_length()
    return max(16, min(pow2, max_align))


def pitched_strides(shape: tuple[int, ...], itemsize: int, max_align: int) -> tuple[int, ...]:
    """Element strides of a pitched tensor (contiguous for rank < 2 or when ``max_align`` is 0)."""
    rank = len(shape)
    if rank < 2 or max_align <= 0:
        return _contiguous(shape)
    width = shape[-1]
    align = optimal_row_align(width, itemsize, max_align)
    width_bytes = width * itemsize
    pitch = -(-width_bytes // align) * align
    strides = [1] * rank
    strides[rank - 2] = pitch // itemsize
    for i in range(rank - 3, -1, -1):
        strides[i] = strides[i + 1] * shape[i + 1]
    return tuple(strides)


def _contiguous(shape: tuple[int, ...]) -> tuple[int, ...]:
    strides = []
    acc = 1
    for s in reversed(shape):
        strides.append(acc)
        acc *= max(s, 1)
    return tuple(reversed(strides))


@dataclass(frozen=True, slots=True)
class Rows:
    """A tensor seen as ``height`` rows of ``width`` bytes, ``pitch`` bytes apart (a 2-D copy)."""

    width: int
    height: int
    pitch: int

    @property
    def nbytes(self) -> int:
        """Bytes of the rows without padding (the contiguous host size)."""
        return self.width * self.height


def pitched_rows(shape: tuple[int, ...], strides: tuple[int, ...], itemsize: int) -> Rows | None:
    """The 2-D geometry of a pitched row-major layout, or None when it is contiguous (or not pitched)."""
    rank = len(shape)
    if rank < 2 or strides == _contiguous(shape) or any(s == 0 for s in shape):
        return None
    if strides[-1] != 1 or strides[-2] < shape[-1]:
        return None
    for i in range(rank - 3, -1, -1):
        if strides[i] != strides[i + 1] * shape[i + 1]:
            return None
    height = 1
    for s in shape[:-1]:
        height *= s
    return Rows(shape[-1] * itemsize, height, strides[-2] * itemsize)
