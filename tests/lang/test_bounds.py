"""The bound-check analysis of shared and local accesses: checks it can prove unneeded are dropped
from checked launches (a constant ``range`` loop's variable in its body, locals assigned once), the
others kept; results match numpy either way."""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.lang import Array, f32, ir


@cl.kernel
def bounds(x: Array[f32], y: Array[f32]):
    tile = cl.shared(f32, 64)  # 8 x 8 units
    spare = cl.shared(f32, 9)
    ty = cl.UNIT_POS_Y  # assigned once: below 8
    tx = cl.UNIT_POS_X
    tile[ty * 8 + tx] = x[ty * 8 + tx]  # proven
    cl.sync_cube()
    if tx == 0 and ty == 0:
        for k in range(8):
            spare[k] = tile[ty * 8 + k]  # proven: k < 8
        for k2 in range(10):
            if k2 > 8:
                spare[k2] = 5.0  # k2 reaches 9: checked, the write dropped
        j = tx
        j = j + 9  # assigned twice: unknown
        spare[j] = 7.0  # checked (9 is out of bounds: dropped)
        for k3 in range(2):
            for k3 in range(20):  # noqa: B007 (a nested loop over the same name: no bound)
                pass
            spare[k3] = 1.0  # checked
        y[ty] = spare[ty] + spare[7]


def _accesses(node: Any, out: list[tuple[str, str, bool]]) -> list[tuple[str, str, bool]]:
    """(kind, array, checked) of every Load and Store under ``node``."""
    if isinstance(node, (ir.Load, ir.Store)):
        out.append((type(node).__name__, node.array, node.checked))
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            _accesses(getattr(node, f.name), out)
    elif isinstance(node, (tuple, list)):
        for item in node:
            _accesses(item, out)
    return out


def test_provable_shared_accesses_are_not_checked() -> None:
    k = bounds.specialize_for("python", None, (8, 8, 1), True, {}).ir
    got = [(kind, checked) for kind, array, checked in _accesses(k.body, []) if array in ("tile", "spare")]
    assert got == [
        ("Store", False),  # tile[ty * 8 + tx] = ...
        ("Store", False), ("Load", False),  # spare[k] = tile[ty * 8 + k]
        ("Store", True),  # spare[k2]
        ("Store", True),  # spare[j]
        ("Store", True),  # spare[k3]
        ("Load", False), ("Load", False),  # spare[ty], spare[7]
    ]


def test_checked_results(client: Any) -> None:
    xs = np.arange(64, dtype=np.float32) + 1
    x, y = client.create(xs), client.create(np.zeros(8, np.float32))
    bounds.launch(client, 1, (8, 8, 1), x, y)
    want = np.zeros(8, np.float32)
    want[0] = xs[0] + xs[7]  # spare[0] + spare[7]; the out-of-bounds writes to spare dropped
    np.testing.assert_array_equal(client.to_numpy(y, "f32"), want)


@cl.func
def _put(sh: Any, i: Any, flag: Any) -> None:
    if flag:
        i = cl.UNIT_POS_X  # the parameter held the argument before: no bound from this assignment
    sh[i] = 1.0


@cl.kernel
def param_reassigned(y: Array[f32]):
    sh = cl.shared(f32, 64)
    _put(sh, cl.ABSOLUTE_POS, cl.CUBE_POS_X == 0)
    cl.sync_cube()
    y[cl.UNIT_POS_X] = sh[cl.UNIT_POS_X]


@cl.kernel
def unrolled_twice(y: Array[f32]):
    sh = cl.shared(f32, 64)
    for k in cl.unroll(range(2)):
        j = cl.UNIT_POS_X * (k + 1)  # one assignment in the source, two in the kernel
        sh[j] = 2.0
    cl.sync_cube()
    y[cl.UNIT_POS_X] = sh[cl.UNIT_POS_X]


def test_a_reassigned_local_keeps_its_checks() -> None:
    for kernel in (param_reassigned, unrolled_twice):
        k = kernel.specialize_for("python", None, (64, 1, 1), True, {}).ir
        found = _accesses(k.body, [])
        stores = [checked for kind, array, checked in found if kind == "Store" and array == "sh"]
        assert stores and stores[-1], f"{kernel.__name__}: the last store to sh must stay checked: {stores}"
