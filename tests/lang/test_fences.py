"""Which sync_cube() barriers order global memory too (lang/fences.py): only those a global write
may precede get WGSL's storageBarrier; results stay right on every backend."""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.lang import Array, codegen_wgsl, f32, ir
from cubeplug.lang.fences import storage_fenced
from cubeplug.testing.suite.lang import lang_block_sum as shared_only  # loads x, writes out last


@cl.kernel
def through_global(x: Array[f32], y: Array[f32]):
    i = cl.ABSOLUTE_POS_X
    y[i] = x[i] * 2.0
    cl.sync_cube()  # each unit then reads its neighbour's global write
    x[i] = y[(i + 1) % 64]


@cl.kernel
def written_later_in_a_loop(x: Array[f32], y: Array[f32]):
    i = cl.UNIT_POS_X
    for k in range(3):
        cl.sync_cube()  # the previous iteration's write to y comes before it
        y[i] = y[(i + 1) % 64] + x[i] + f32(k)


@cl.kernel
def read_then_written(x: Array[f32]):
    i = cl.UNIT_POS_X
    v = x[i]
    cl.sync_cube()  # the write below must not reach another unit's read above
    x[(i + 1) % 64] = v


@cl.kernel
def written_in_a_branch(x: Array[f32], y: Array[f32]):
    i = cl.UNIT_POS_X
    if i == 0:
        y[0] = 1.0
    cl.sync_cube()
    x[i] = y[0]


def _comptime(kernel: Any) -> dict[str, Any]:
    return {"BLOCK": 64} if kernel is shared_only else {}


def _fences(kernel: Any) -> list[bool]:
    """Per barrier of the WGSL specialization, in order: whether it orders storage memory."""
    k = kernel.specialize_for("wgsl", None, (64, 1, 1), True, _comptime(kernel)).ir
    fenced = storage_fenced(k)
    found: list[bool] = []

    def walk(block: ir.Block) -> None:
        for s in block.stmts:
            if isinstance(s, ir.Barrier):
                found.append(id(s) in fenced)
            elif isinstance(s, ir.If):
                walk(s.then)
                walk(s.orelse)
            elif isinstance(s, (ir.RangeFor, ir.While)):
                walk(s.body)

    walk(k.body)
    return found


def test_only_barriers_after_an_access_to_a_written_global_order_storage() -> None:
    assert _fences(shared_only) == [False, False]  # loads of x, which it never writes
    assert _fences(through_global) == [True]
    assert _fences(written_later_in_a_loop) == [True]
    assert _fences(written_in_a_branch) == [True]
    assert _fences(read_then_written) == [True]


def test_the_wgsl_source_says_so() -> None:
    def wgsl(kernel: Any) -> str:
        spec = kernel.specialize_for("wgsl", None, (64, 1, 1), True, _comptime(kernel))
        return codegen_wgsl.generate(spec.ir)[0]

    assert "storageBarrier" not in wgsl(shared_only)
    assert wgsl(through_global).count("storageBarrier") == 1


def test_results_through_global_memory(client: Any) -> None:
    x = np.arange(64, dtype=np.float32)
    hx, hy = client.create(x), client.create(np.zeros(64, np.float32))
    through_global.launch(client, 1, 64, hx, hy)
    np.testing.assert_array_equal(client.to_numpy(hx, "f32"), np.roll(x * 2, -1))
    hs, out = client.create(x), client.create(np.zeros(1, np.float32))
    shared_only.launch(client, 1, 64, hs, out, BLOCK=64)
    assert client.to_numpy(out, "f32")[0] == x.sum()
