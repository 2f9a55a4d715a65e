"""``scan``: the inclusive or exclusive prefix sum (product, maximum, minimum) of ``n`` elements.

Reduce, then scan: three passes, one generic source each, reading the input twice and writing the
output once (3n element transfers; a scan-then-add scheme moves 4n):

1. :func:`block_totals`: each cube folds one block of ``BLOCK = CUBE * PER_UNIT`` consecutive
   elements (coalesced loads, a tree in shared memory) into ``sums[block]``.
2. The totals are scanned inclusively by the same scheme (recursively, until one block holds
   them).
3. :func:`scan_block`: each cube loads its block coalesced into shared memory, each unit scans its
   ``PER_UNIT`` consecutive elements, a Hillis-Steele scan runs over the units' totals, and every
   element is combined with the total before it: the units' before it in the block, and the
   blocks' before it (``sums[block - 1]``). An exclusive scan stores element ``i - 1``'s value at
   ``i`` (the previous block's total, or the identity, at a block's first element).

Whole blocks load without a test per element (with one, Vulkan's compilers keep fewer loads in
flight, as ``reduction.fold_range`` measured): both passes load through :func:`load_block`.
Elements past ``n`` in the last block are loaded as the identity: they change no block total, and
a scan moves only rightwards, so they change no stored result.
Blocks beyond 65535 cubes use a 2-D count (:func:`~cubeplug.std.checks.cube_count`; the kernels
skip the extra cubes).
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks
from cubeplug.std.combine import combine, element_type, identity, lang_type, op_code
from cubeplug.std.reduction import CUBE, LOG_CUBE, cube_tree

#: Consecutive elements each unit scans (a block is CUBE * PER_UNIT elements).
PER_UNIT = 8
BLOCK = CUBE * PER_UNIT


@cl.func
def load_block(x: Array[Any], n: Any, base: Any, pad: Any, dst: Array[Any], at: Any, step: Any) -> None:
    """``dst[at + k * step]``: element ``base + k * CUBE + u`` of ``x`` for each of unit ``u``'s
    PER_UNIT elements ``k`` of the block at ``base`` (coalesced: neighbouring units load neighbouring
    elements), or ``pad`` past ``n``. A whole block loads with no test between the loads."""
    u = cl.UNIT_POS_X
    if n - base >= BLOCK:  # a whole block (base < n; base + BLOCK could wrap past 2^32)
        for k in cl.unroll(range(PER_UNIT)):
            dst[at + k * step] = x[base + k * CUBE + u]
    else:
        for k in cl.unroll(range(PER_UNIT)):
            i = base + k * CUBE + u
            v = pad
            if i < n:
                v = x[i]
            dst[at + k * step] = v


@cl.kernel
def block_totals(
    x: Array[T], sums: Array[T], n: u32, blocks: u32, ident: T,  # type: ignore[name-defined]  # noqa: F821
    OP: Comptime[int], T: Comptime[cl.DType],
) -> None:
    """``sums[block]``: ``op`` over the block's elements (those before ``n``)."""
    buf = cl.shared(T, CUBE)
    blk = cl.CUBE_POS
    u = cl.UNIT_POS_X
    if blk < blocks:
        vals = cl.local(T, PER_UNIT)
        load_block(x, n, blk * BLOCK, ident, vals, 0, 1)
        acc = ident
        for k in cl.unroll(range(PER_UNIT)):
            acc = combine(OP, T, acc, vals[k])
        buf[u] = acc
        cube_tree(OP, T, buf)
        if u == 0:
            sums[blk] = buf[0]


@cl.kernel
def scan_block(
    x: Array[T], out: Array[T], sums: Array[T], n: u32, blocks: u32, ident: T,  # type: ignore[name-defined]  # noqa: F821
    OP: Comptime[int], EXCLUSIVE: Comptime[bool], T: Comptime[cl.DType],
) -> None:
    """The scan of each block, offset by the inclusive scan of the blocks' totals in ``sums``."""
    tile = cl.shared(T, BLOCK)
    tot = cl.shared(T, CUBE)
    blk = cl.CUBE_POS
    u = cl.UNIT_POS_X
    if blk < blocks:
        base = blk * BLOCK
        load_block(x, n, base, ident, tile, u, CUBE)
        cl.sync_cube()
        acc = tile[u * PER_UNIT]
        for k in cl.unroll(range(1, PER_UNIT)):
            acc = combine(OP, T, acc, tile[u * PER_UNIT + k])
            tile[u * PER_UNIT + k] = acc
        tot[u] = acc
        cl.sync_cube()
        for k in cl.unroll(range(LOG_CUBE)):
            w = tot[u]
            if u >= (1 << k):
                w = combine(OP, T, tot[u - (1 << k)], w)
            cl.sync_cube()
            tot[u] = w
            cl.sync_cube()
        # What comes before this unit's elements: the blocks before, then the units before.
        before = ident
        if blk > 0:
            before = sums[blk - 1]
        if u > 0:
            before = combine(OP, T, before, tot[u - 1])
        if blk > 0 or u > 0:
            for k in cl.unroll(range(PER_UNIT)):
                tile[u * PER_UNIT + k] = combine(OP, T, before, tile[u * PER_UNIT + k])
        cl.sync_cube()
        for k in cl.unroll(range(PER_UNIT)):
            p = k * CUBE + u
            i = base + p
            if i < n:
                if EXCLUSIVE:
                    if p > 0:
                        out[i] = tile[p - 1]
                    elif blk > 0:
                        out[i] = sums[blk - 1]
                    else:
                        out[i] = ident
                else:
                    out[i] = tile[p]


def _scan(client: Any, x: Handle, n: int, op: int, name: str, exclusive: bool, out: Handle) -> None:
    """``out[:n]``: the scan of ``x[:n]`` (n > 0)."""
    T = lang_type(name)
    size = DTYPES[name].itemsize
    blocks = -(-n // BLOCK)
    count = checks.cube_count(blocks)
    ident = identity(op, name)
    sums: Handle = x  # unread when one block holds everything
    if blocks > 1:
        totals: Handle = client.empty(blocks * size)
        block_totals.launch_unchecked(client, count, CUBE, x, totals, n, blocks, ident, OP=op, T=T)
        sums = client.empty(blocks * size)
        _scan(client, totals, blocks, op, name, False, sums)
    scan_block.launch_unchecked(client, count, CUBE, x, out, sums, n, blocks, ident, OP=op,
                                EXCLUSIVE=exclusive, T=T)


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
    if n:
        _scan(client, handle, n, code, name, not inclusive, out)
    return out
