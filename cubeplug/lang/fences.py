"""Which ``sync_cube()`` barriers must also order global memory (storage buffers).

``sync_cube`` promises what CUDA's ``__syncthreads`` does: after it, every unit of the cube sees
the shared *and* global memory writes the cube's units made before it. In WGSL that takes two
barriers, ``storageBarrier()`` and ``workgroupBarrier()``; the first is not free (on the H200's
Vulkan driver a 256-unit shared-memory block sum with both ran 2.8x slower than the hand-written
WGSL with the workgroup barrier alone, bench/bench_lang_vs_c.py). A barrier that no global write
can precede orders nothing in storage memory, so it needs only the workgroup barrier.

:func:`storage_fenced` finds the barriers a global write may precede: one after a global store or
atomic on some path from the kernel's start, or inside a loop whose body writes global memory (the
next iteration comes after that write). Shared and local arrays are workgroup or private memory,
which the workgroup barrier orders.
"""

from __future__ import annotations

from cubeplug.lang import ir


def storage_fenced(kernel: ir.KernelIR) -> frozenset[int]:
    """The ``id`` of each :class:`~cubeplug.lang.ir.Barrier` of ``kernel`` that a write to a global
    array may precede (those need the storage barrier too)."""
    globals_ = frozenset(a.name for a in kernel.arrays)
    fenced: set[int] = set()
    _walk(kernel.body, False, globals_, fenced)
    return frozenset(fenced)


def _writes(block: ir.Block, globals_: frozenset[str]) -> bool:
    """Whether ``block`` (nested statements included) stores to or updates a global array."""
    for s in block.stmts:
        if isinstance(s, (ir.Store, ir.Atomic)):
            if s.array in globals_:
                return True
        elif isinstance(s, ir.If):
            if _writes(s.then, globals_) or _writes(s.orelse, globals_):
                return True
        elif isinstance(s, (ir.RangeFor, ir.While)) and _writes(s.body, globals_):
            return True
    return False


def _walk(block: ir.Block, dirty: bool, globals_: frozenset[str], fenced: set[int]) -> bool:
    """Mark the barriers of ``block`` reached with a global write possibly before them (``dirty``
    on entry); whether one may have happened by the block's end."""
    for s in block.stmts:
        if isinstance(s, ir.Barrier):
            if dirty:
                fenced.add(id(s))
        elif isinstance(s, (ir.Store, ir.Atomic)):
            dirty = dirty or s.array in globals_
        elif isinstance(s, ir.If):
            then = _walk(s.then, dirty, globals_, fenced)
            orelse = _walk(s.orelse, dirty, globals_, fenced)
            dirty = then or orelse
        elif isinstance(s, (ir.RangeFor, ir.While)):
            # A later iteration follows the body's writes: the body starts dirty if it writes.
            dirty = _walk(s.body, dirty or _writes(s.body, globals_), globals_, fenced) or dirty
    return dirty
