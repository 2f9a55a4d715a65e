"""``reduce``: the sum, product, maximum or minimum of ``n`` elements, in any std dtype, autotuned.

One generic source: :func:`cube_reduce` folds a grid-stride slice of the input into one value per
unit and then a tree in shared memory into one value per cube; the ``OP`` and ``T`` comptime
values pick the operator and the element type. Candidates (:func:`reduce_set`, one tunable set per
operator and dtype):

* ``tree``: one element per unit before the grid-stride loop wraps; passes of partials per cube
  until one cube is left.
* ``tree_x16``: sixteen elements per unit (sixteen times fewer cubes and partials).
* ``tree_x16_ilp4``: the same with four independent loads in flight per unit.
* ``resident_ilp4``: four loads in flight, at most one wave of cubes (8 per compute unit, as the
  device reports them), each unit looping over its share of the input.
* ``atomic_x16_ilp4``: one pass, each cube folding its value into the result with an atomic (sum
  of f32/i32/u32, max/min of i32/u32) where the device has atomics. The order of f32 additions
  varies from run to run.

The result has the input's dtype (integer sums and products wrap, as numpy's with ``dtype=``).
``max``/``min`` propagate NaN (see :mod:`cubeplug.std.combine`); an empty input is an error for
them and gives 0 (sum) or 1 (prod).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from cubeplug import lang as cl
from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.core.tune import AutotuneKey, Tunable, TunableSet, anchor, autotune
from cubeplug.lang import Array, Comptime, u32
from cubeplug.std import checks
from cubeplug.std.combine import MAX, MIN, PROD, SUM, combine, element_type, identity, lang_type, op_code
from cubeplug.std.reduce import resident_cubes

#: Units per cube of the reductions (a power of two: the tree halves it).
CUBE = 256
#: log2(CUBE): the steps of the tree.
LOG_CUBE = 8


@cl.func
def cube_tree(op: int, T: cl.DType, buf: Array[Any]) -> None:
    """Fold ``buf`` (shared, CUBE long, one value per unit, written by every unit before the call)
    into ``buf[0]`` with a tree of LOG_CUBE halvings; every unit of the cube calls it (it syncs).
    The reductions, the reductions along an axis and the scan's block totals all end with it."""
    u = cl.UNIT_POS_X
    cl.sync_cube()  # every unit's value is in buf
    for k in cl.unroll(range(LOG_CUBE)):
        # (CUBE >> (k + 1)) written out: a local assigned here would be a runtime i32 when a
        # caller's runtime loop holds the call (axis.py), not the comptime int that compares with u32.
        if u < (CUBE >> (k + 1)):
            buf[u] = combine(op, T, buf[u], buf[u + (CUBE >> (k + 1))])
        cl.sync_cube()


@cl.func
def cube_reduce(op: int, T: cl.DType, x: Array[Any], n: int, buf: Array[Any], ilp: int) -> None:
    """Fold ``x[ABSOLUTE_POS_X::stride][:n]`` into ``buf[0]`` for the cube (``buf`` shared, CUBE long).

    ``ilp`` loads per unit are issued together before they are folded (independent, unguarded
    loads stay in flight at once; a guarded tail loop takes the rest). A unit without elements
    starts from ``x[0]`` for max/min, which is an element of the input and so changes nothing (no
    -inf literal needed), and from the identity for sum/prod.
    """
    acc = T(0)
    if op == PROD:
        acc = T(1)
    if op >= MAX:
        acc = x[0]
    stride = cl.CUBE_DIM_X * cl.CUBE_COUNT_X
    i = cl.ABSOLUTE_POS_X
    if ilp > 1:
        vals = cl.local(T, ilp)
        while i + (ilp - 1) * stride < n:
            for k in cl.unroll(range(ilp)):
                vals[k] = x[i + k * stride]
            for k in cl.unroll(range(ilp)):
                acc = combine(op, T, acc, vals[k])
            i += ilp * stride
    while i < n:
        acc = combine(op, T, acc, x[i])
        i += stride
    buf[cl.UNIT_POS_X] = acc
    cube_tree(op, T, buf)


@cl.kernel
def reduce_pass(
    x: Array[T], out: Array[T], n: u32, OP: Comptime[int], ILP: Comptime[int], T: Comptime[cl.DType],  # type: ignore[name-defined]  # noqa: F821
) -> None:
    """One partial per cube: ``out[CUBE_POS_X]``."""
    buf = cl.shared(T, CUBE)
    cube_reduce(OP, T, x, n, buf, ILP)
    if cl.UNIT_POS_X == 0:
        out[cl.CUBE_POS_X] = buf[0]


@cl.kernel
def reduce_atomic(
    x: Array[T], out: Array[cl.Atomic[T]], n: u32, OP: Comptime[int], ILP: Comptime[int],  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType],
) -> None:
    """Every cube folds its value into ``out[0]`` atomically (``out`` holds the identity first)."""
    buf = cl.shared(T, CUBE)
    cube_reduce(OP, T, x, n, buf, ILP)
    if cl.UNIT_POS_X == 0:
        if OP == SUM:
            cl.atomic_add(out, 0, buf[0])
        elif OP == MAX:
            cl.atomic_max(out, 0, buf[0])
        else:
            cl.atomic_min(out, 0, buf[0])


def tree(op: int, name: str, per_unit: int, ilp: int = 1, resident: bool = False) -> Any:
    """A strategy: partials per cube (``per_unit`` elements per unit, ``ilp`` loads in flight per
    unit; ``resident``: at most one wave of cubes), pass after pass, until one."""
    T = lang_type(name)
    size = DTYPES[name].itemsize

    def run(client: Any, x: Handle, n: int) -> Handle:
        while True:
            cubes = checks.groups(n, CUBE * per_unit)
            if resident:
                # One wave, but no more than 32768 elements per unit: lavapipe ends a shader
                # loop after 65535 iterations, silently.
                cubes = min(cubes, max(resident_cubes(client), checks.groups(n, CUBE * 32768)))
            out: Handle = client.empty(size * cubes)
            reduce_pass.launch_unchecked(client, CubeCount(cubes), CUBE, x, out, n, OP=op, ILP=ilp, T=T)
            if cubes == 1:
                return out
            x, n = out, cubes

    return run


def atomic(op: int, name: str, per_unit: int, ilp: int) -> Any:
    """A strategy: one pass, each cube's value folded into the result atomically."""
    T = lang_type(name)
    start = np.array([identity(op, name)])

    def run(client: Any, x: Handle, n: int) -> Handle:
        out: Handle = client.create(start)
        cubes = checks.groups(n, CUBE * per_unit)
        reduce_atomic.launch_unchecked(client, CubeCount(cubes), CUBE, x, out, n, OP=op, ILP=ilp, T=T)
        return out

    return run


def atomic_ok(op: int, name: str) -> bool:
    """True when the language has the atomic that ``op`` on ``name`` needs."""
    if op == SUM:
        return name in ("f32", "i32", "u32")
    return op in (MAX, MIN) and name in ("i32", "u32")


def reduce_key(client: Any, level: str, x: Handle, n: int) -> AutotuneKey:
    """The tuning key: the anchored count."""
    return AutotuneKey(("n", anchor(n, level, checks.MAX_ELEMENTS)))


def host_reduce(op: int, host: np.ndarray) -> Any:
    """numpy's result of ``op`` over ``host`` in its own dtype (the reference of tests and tuning)."""
    if op == SUM:
        return host.sum(dtype=host.dtype)
    if op == PROD:
        return host.prod(dtype=host.dtype)
    return host.max() if op == MAX else host.min()


@functools.cache
def reduce_set(op: int, name: str) -> TunableSet:
    """The tunable set of ``op`` on ``name`` (cached: one tuner per operation and dtype)."""
    dt = DTYPES[name]

    def has_atomics(client: Any, key: AutotuneKey) -> bool:
        return bool(client.capabilities.atomics)

    def reference(client: Any, x: Handle, n: int) -> Handle:
        host = client.to_numpy(checks.prefix(x, n * dt.itemsize), name)
        made: Handle = client.create(np.array([host_reduce(op, host)], dtype=dt))
        return made

    def compare(client: Any, expected: Handle, got: Handle, x: Handle, n: int) -> str | None:
        want = client.to_numpy(expected, name)[0]
        have = client.to_numpy(got, name)[0]
        if dt.kind != "f" or op in (MAX, MIN):
            same = want == have or (np.isnan(want) and np.isnan(have)) if dt.kind == "f" else want == have
            return None if same else f"{have!r}, reference {want!r}"
        # Float sums and products: the order of the operations differs; allow its rounding.
        scale = abs(float(want)) + 1.0
        tol = 1e-2 if name == "f16" else 1e-4
        return None if abs(float(have) - float(want)) <= tol * scale * np.log2(n + 2) else (
            f"{have!r}, reference {want!r}")

    tunables = [
        Tunable("tree", tree(op, name, 1), priority=2),
        Tunable("tree_x16", tree(op, name, 16), priority=2),
        Tunable("tree_x16_ilp4", tree(op, name, 16, ilp=4), priority=2),
        Tunable("resident_ilp4", tree(op, name, 4, ilp=4, resident=True), priority=1),
    ]
    if atomic_ok(op, name):
        tunables.append(
            Tunable("atomic_x16_ilp4", atomic(op, name, 16, 4), priority=1, applicable=has_atomics)
        )
    return TunableSet(f"std.reduce.{name}.{op}", tunables, reduce_key, compare=compare, reference=reference)


def reduce(client: Any, handle: Handle, n: int, op: str = "sum", dtype: Any = "f32") -> Handle:
    """``op`` ("sum", "prod", "max", "min") over the first ``n`` elements of ``handle`` (of
    ``dtype``), as a new one-element handle of ``dtype`` (autotuned)."""
    code = op_code(op, "reduce")
    name = element_type(client, dtype, "reduce")
    n = checks.count(n)
    checks.buffer(client, handle, n * DTYPES[name].itemsize, "reduce: handle")
    if n == 0:
        if code in (MAX, MIN):
            raise ValidationError(f"reduce: op={op!r} of an empty input has no value (numpy raises too); "
                                  "check n > 0 first")
        empty: Handle = client.create(np.array([identity(code, name)]))
        return empty
    result: Handle = autotune(client, reduce_set(code, name), handle, n)
    return result
