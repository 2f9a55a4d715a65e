"""``scan``: the inclusive or exclusive prefix sum (product, maximum, minimum) of ``n`` elements.

Multi-pass block scan, one generic source per pass:

1. :func:`scan_block`: each cube scans a block of ``CUBE * PER_UNIT`` elements (loaded coalesced
   into shared memory; each unit scans its ``PER_UNIT`` consecutive elements; a Hillis-Steele scan
   of the units' totals; each unit adds the total before it) and writes the block's total.
2. The totals are scanned the same way (recursively, until one block holds them).
3. :func:`scan_finish`: each element gets the scanned total of the blocks before its own; for an
   exclusive scan, element ``i`` takes the inclusive value of ``i - 1`` (and the identity at 0).

Elements past ``n`` in the last block are loaded as 0: a scan moves only rightwards, so they change
no result, and the last block's total is never used. Blocks beyond 65535 cubes use a 2-D count.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks
from cubeplug.std.combine import combine, element_type, identity, lang_type, op_code
from cubeplug.std.reduction import CUBE, LOG_CUBE

#: Consecutive elements each unit scans in the block pass (a block is CUBE * PER_UNIT elements).
PER_UNIT = 8
BLOCK = CUBE * PER_UNIT


@cl.kernel
def scan_block(
    x: Array[T], out: Array[T], sums: Array[T], n: u32, blocks: u32,  # type: ignore[name-defined]  # noqa: F821
    OP: Comptime[int], T: Comptime[cl.DType],
) -> None:
    """The inclusive scan of each block into ``out``, the block's total into ``sums[block]``."""
    tile = cl.shared(T, BLOCK)
    tot = cl.shared(T, CUBE)
    blk = cl.CUBE_POS
    u = cl.UNIT_POS_X
    if blk < blocks:
        base = blk * BLOCK
        for k in cl.unroll(range(PER_UNIT)):
            i = base + k * CUBE + u
            v = T(0)
            if i < n:
                v = x[i]
            tile[k * CUBE + u] = v
        cl.sync_cube()
        acc = tile[u * PER_UNIT]
        for k in cl.unroll(range(1, PER_UNIT)):
            acc = combine(OP, acc, tile[u * PER_UNIT + k])
            tile[u * PER_UNIT + k] = acc
        tot[u] = acc
        cl.sync_cube()
        for k in cl.unroll(range(LOG_CUBE)):
            w = tot[u]
            if u >= (1 << k):
                w = combine(OP, tot[u - (1 << k)], w)
            cl.sync_cube()
            tot[u] = w
            cl.sync_cube()
        if u > 0:
            pre = tot[u - 1]
            for k in cl.unroll(range(PER_UNIT)):
                tile[u * PER_UNIT + k] = combine(OP, pre, tile[u * PER_UNIT + k])
        cl.sync_cube()
        for k in cl.unroll(range(PER_UNIT)):
            i = base + k * CUBE + u
            if i < n:
                out[i] = tile[k * CUBE + u]
        if u == 0:
            sums[blk] = tot[CUBE - 1]


@cl.kernel
def scan_finish(
    part: Array[T], sums: Array[T], out: Array[T], n: u32, ident: T,  # type: ignore[name-defined]  # noqa: F821
    OP: Comptime[int], EXCLUSIVE: Comptime[bool], T: Comptime[cl.DType],
) -> None:
    """``out[i]``: the block-scanned ``part`` of ``i`` (of ``i - 1`` when exclusive) combined with
    the inclusive scan of the totals of the blocks before it."""
    for i in range(cl.ABSOLUTE_POS_X, n, cl.CUBE_DIM_X * cl.CUBE_COUNT_X):
        if EXCLUSIVE and i == 0:
            out[i] = ident
        else:
            j = i
            if EXCLUSIVE:
                j = i - 1
            v = part[j]
            b = j // BLOCK
            if b > 0:
                v = combine(OP, sums[b - 1], v)
            out[i] = v


def _count(blocks: int) -> CubeCount:
    """A count of ``blocks`` cubes, 2-D beyond 65535 (the kernel skips the extra ones)."""
    if blocks <= checks.MAX_GROUPS:
        return CubeCount(blocks)
    return CubeCount(checks.MAX_GROUPS, -(-blocks // checks.MAX_GROUPS))


def _inclusive(client: Any, x: Handle, n: int, op: int, name: str, out: Handle | None) -> Handle:
    """The inclusive scan of ``x[:n]``, into ``out`` (or a new handle) when one block holds it."""
    T = lang_type(name)
    size = DTYPES[name].itemsize
    blocks = -(-n // BLOCK)
    part: Handle = client.empty(n * size) if out is None or blocks > 1 else out
    sums: Handle = client.empty(blocks * size)
    scan_block.launch_unchecked(client, _count(blocks), CUBE, x, part, sums, n, blocks, OP=op, T=T)
    if blocks == 1:
        return part
    scanned = _inclusive(client, sums, blocks, op, name, None)
    target: Handle = client.empty(n * size) if out is None else out
    scan_finish.launch_unchecked(client, CubeCount(checks.groups(n, CUBE)), CUBE, part, scanned, target, n,
                                 identity(op, name), OP=op, EXCLUSIVE=False, T=T)
    return target


def scan(client: Any, handle: Handle, n: int, inclusive: bool = True, op: str = "sum",
         dtype: Any = "f32") -> Handle:
    """The prefix ``op`` ("sum", "prod", "max", "min") of the first ``n`` elements of ``handle``
    (``numpy.cumsum`` and friends in the input's dtype), as a new handle of ``n`` elements.
    Exclusive: element ``i`` holds the op over the elements before ``i`` (the identity at 0: 0, 1,
    or the lowest / highest value of the dtype, -inf / inf for floats)."""
    code = op_code(op, "scan")
    name = element_type(client, dtype, "scan")
    n = checks.count(n)
    size = DTYPES[name].itemsize
    checks.buffer(client, handle, n * size, "scan: handle")
    out: Handle = client.empty(n * size)
    if n == 0:
        return out
    if inclusive:
        return _inclusive(client, handle, n, code, name, out)
    T = lang_type(name)
    blocks = -(-n // BLOCK)
    part: Handle = client.empty(n * size)
    sums: Handle = client.empty(blocks * size)
    scan_block.launch_unchecked(client, _count(blocks), CUBE, handle, part, sums, n, blocks, OP=code, T=T)
    scanned = _inclusive(client, sums, blocks, code, name, None) if blocks > 1 else sums
    scan_finish.launch_unchecked(client, CubeCount(checks.groups(n, CUBE)), CUBE, part, scanned, out, n,
                                 identity(code, name), OP=code, EXCLUSIVE=True, T=T)
    return out
