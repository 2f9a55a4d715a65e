"""Which ``sync_cube()`` barriers must also order global memory (storage buffers).

``sync_cube`` promises what CUDA's ``__syncthreads`` does: the cube's global memory accesses before
it are ordered before those after it, for every unit. In WGSL that takes two barriers,
``storageBarrier()`` and ``workgroupBarrier()``; the first is not free (on the H200's Vulkan driver
a 256-unit shared-memory block sum with both ran 2.8x slower than the hand-written WGSL with the
workgroup barrier alone, bench/bench_lang_vs_c.py). A barrier that no access of a global array the
kernel writes can precede orders nothing in storage memory, so it needs only the workgroup barrier.

:func:`storage_fenced` finds the barriers that such an access may precede: a store or atomic on a
global array, or a load of a global array the kernel writes anywhere (a write after the barrier
must not be seen by a read before it), on some path from the kernel's start, or inside a loop
whose body has one (the next iteration comes after it). Loads of arrays the kernel only reads
need no order. Shared and local arrays are workgroup or private memory, which the workgroup
barrier orders.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from cubeplug.lang import ir


def storage_fenced(kernel: ir.KernelIR) -> frozenset[int]:
    """The ``id`` of each :class:`~cubeplug.lang.ir.Barrier` of ``kernel`` that an access to a
    global array the kernel writes may precede (those need the storage barrier too)."""
    arrays = frozenset(a.name for a in kernel.arrays)
    written = frozenset(_written(kernel.body, arrays))
    fenced: set[int] = set()
    _walk(kernel.body, False, written, fenced)
    return frozenset(fenced)


def _written(block: ir.Block, arrays: frozenset[str]) -> set[str]:
    """The global arrays ``block`` stores to or updates (nested statements included)."""
    found: set[str] = set()
    for s in block.stmts:
        if isinstance(s, (ir.Store, ir.Atomic)) and s.array in arrays:
            found.add(s.array)
        for inner in _blocks(s):
            found |= _written(inner, arrays)
    return found


def _blocks(s: ir.Stmt) -> tuple[ir.Block, ...]:
    if isinstance(s, ir.If):
        return (s.then, s.orelse)
    if isinstance(s, (ir.RangeFor, ir.While)):
        return (s.body,)
    return ()


def _touches(node: Any, written: frozenset[str]) -> bool:
    """Whether ``node`` (a statement's own expressions: nested blocks are not looked into) stores
    to, updates or loads an array of ``written``."""
    if isinstance(node, ir.Block):
        return False
    if isinstance(node, (ir.Store, ir.Atomic, ir.Load)) and node.array in written:
        return True
    if dataclasses.is_dataclass(node) and not isinstance(node, type):
        return any(_touches(getattr(node, f.name), written) for f in dataclasses.fields(node))
    if isinstance(node, tuple):
        return any(_touches(item, written) for item in node)
    return False


def _anywhere(block: ir.Block, written: frozenset[str]) -> bool:
    """Whether ``block`` (nested statements included) touches an array of ``written``."""
    return any(_touches(s, written) or any(_anywhere(b, written) for b in _blocks(s)) for s in block.stmts)


def _walk(block: ir.Block, dirty: bool, written: frozenset[str], fenced: set[int]) -> bool:
    """Mark the barriers of ``block`` reached with an access to a written global array possibly
    before them (``dirty`` on entry); whether one may have happened by the block's end."""
    for s in block.stmts:
        if isinstance(s, ir.Barrier):
            if dirty:
                fenced.add(id(s))
            continue
        dirty = dirty or _touches(s, written)  # a condition or a loop's bounds included
        if isinstance(s, ir.If):
            then = _walk(s.then, dirty, written, fenced)
            orelse = _walk(s.orelse, dirty, written, fenced)
            dirty = then or orelse
        elif isinstance(s, (ir.RangeFor, ir.While)):
            # A later iteration follows the body's accesses: the body starts dirty if it has one.
            dirty = _walk(s.body, dirty or _anywhere(s.body, written), written, fenced) or dirty
    return dirty
