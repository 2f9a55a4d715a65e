"""``reduce``: the sum, product, maximum or minimum of ``n`` elements, in any std dtype, autotuned.

One generic source: :func:`cube_reduce` folds a grid-stride slice of the input into one value per
unit and then a tree in shared memory into one value per cube; the ``OP``, ``T`` (and for vector
loads ``V``, ``Vec[T, 4]``) comptime values pick the operator and the element type, ``ILP`` the
loads in flight per unit. Four kernels call it: a partial per cube or an atomic fold, each with
scalar or vector loads. Candidates (:func:`reduce_set`, one tunable set per operator and dtype; a
first pass of partials is followed by one cube over the partials):

* ``tree``: one element per unit before the grid-stride loop wraps, four loads in flight.
* ``tree_x16``: sixteen elements per unit, one load at a time; ``tree_x16_ilp4``: four in flight.
* ``resident_ilp4``: four loads in flight, at most one wave of cubes (8 per compute unit, as the
  device reports them), each unit looping over its share of the input.
* ``vec4``, ``vec4_x4``, ``vec4_x16``, ``vec4_x64``: ``Vec[T, 4]`` loads (f32, i32, u32; a 16-byte
  aligned view of at least 4 elements: the key's ``vec``), 1 / 4 / 16 / 64 vectors per unit, four
  in flight; ``vec4_resident``: the same with one wave of cubes.
* ``atomic_x16_ilp4``, ``atomic_vec4_x16``: one pass, each cube folding its value into the result
  with an atomic (sum, max, min of f32/i32/u32) where the device has atomics. The order
  of f32 additions varies from run to run. ``atomic_x16_ilp1``: the same with one load at a time,
  the candidate of the cpu backend's interpreter, where every statement costs a pass over the lanes
  and a kernel's statements cost more than its loads (no private array of loads in flight, no
  second pass: 1M f32 sum 3.4 ms against 5.0 for ``atomic_x16_ilp4`` and 5.9 for
  ``tree_x16_ilp4``, 2 cores).

``reduce_sum`` (:mod:`cubeplug.std.reduce`) is the f32 sum of this set. The language has no plane
(warp) operations: the cube's tree runs in shared memory on every backend, where the hand-written
CUDA kernel ended with warp shuffles; the candidates with many elements per unit make the tree's
share of the time small.

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
from cubeplug.std.combine import (
    MAX,
    MIN,
    PROD,
    SUM,
    VECTOR_DTYPES,
    combine,
    element_type,
    identity,
    is_nan,
    lang_type,
    op_code,
    start,
)
from cubeplug.std.fill import fill_scalar

#: Units per cube of the reductions (a power of two).
CUBE = 256
#: log2(CUBE) (the steps of the halving trees of argmax and the scan).
LOG_CUBE = 8
#: Units that rake the cube's values in :func:`cube_tree` (a warp on NVIDIA), CUBE // RAKE each.
RAKE = 32


@cl.func
def cube_tree(op: int, T: cl.DType, buf: Array[Any]) -> None:
    """Fold ``buf`` (shared, CUBE long, one value per unit, written by every unit before the call)
    into ``buf[0]``; every unit of the cube calls it (it syncs), and after it returns every unit may
    write ``buf`` again. The reductions, the reductions along an axis and the scan's block totals
    all end with it.

    A raking fold (CUB's ``BLOCK_REDUCE_RAKING``), not a halving tree: RAKE units fold CUBE // RAKE
    values each (consecutive units read consecutive words: no bank conflicts), then unit 0 folds
    the RAKE results; three barriers where the tree of LOG_CUBE halvings had nine. Barriers are
    what such a tree costs (the hand-written CUDA kernel ended with warp shuffles instead, which
    the language does not have)."""
    u = cl.UNIT_POS_X
    cl.sync_cube()  # every unit's value is in buf
    if u < RAKE:
        acc = buf[u]
        for k in cl.unroll(range(1, CUBE // RAKE)):
            acc = combine(op, T, acc, buf[u + k * RAKE])
        buf[u] = acc
    cl.sync_cube()
    if u == 0:
        total = buf[0]
        for k in cl.unroll(range(1, RAKE)):
            total = combine(op, T, total, buf[k])
        buf[0] = total
    cl.sync_cube()  # buf[1:RAKE] read before any unit writes buf again (callers loop: axis, scan)


@cl.func
def fold(op: int, T: cl.DType, E: cl.DType, acc: Any, v: Any) -> Any:
    """``acc op v`` for an element ``v`` of type ``E``: ``T`` itself, or a ``Vec[T, 4]`` whose lanes
    are folded pairwise first (``(v.x op v.y) op (v.z op v.w)``, as the hand-written float4 loop)."""
    # One return of a comptime choice, not a returning `if` (a helper with early returns assigns its
    # result to a local of its own): a statement less per fold for the cpu interpreter.
    return combine(op, T, acc, combine(op, T, combine(op, T, v.x, v.y), combine(op, T, v.z, v.w))
                   if E.lanes == 4 else v)


@cl.func
def fold_range(
    op: int, T: cl.DType, E: cl.DType, acc: Any, src: Any, row: Any, line: bool, first: Any, stop: Any,
    step: Any, ilp: int,
) -> Any:
    """``acc`` folded (:func:`fold`) with the elements ``j`` in ``range(first, stop, step)`` of line
    ``row`` of the Tensor ``src`` (``line``, comptime: ``axis_pass`` and ``column_pass`` of
    :mod:`cubeplug.std.axis`) or of the array ``src`` (elements of type ``E``; ``row`` unused: the
    grid-stride slice of :func:`cube_reduce`): the loop of every unit of the reductions.

    ``ilp`` loads (comptime) are issued together before they are folded: independent, unguarded
    loads stay in flight at once; a guarded tail loop takes the rest. Vulkan's compiler does not
    unroll the plain loop as NVRTC and NVIDIA's OpenCL do: on the H200 (reduce_axis, 16k x 16k f32)
    one load a step took 1.86x and 1.80x CUDA's device time along axis 1 and 0, four 1.05x and 1.02x.
    The layout is a comptime choice in the loads, not a loader ``@cl.func``: the value an inlined
    helper reads from memory, and an index expression it is given, each take a local of their own,
    three statements a load where the loop has one (a third more per step for the cpu interpreter).
    """
    j = first
    if ilp > 1:
        vals = cl.local(E, ilp)
        while j + (ilp - 1) * step < stop:
            for k in cl.unroll(range(ilp)):
                vals[k] = src[row, j + k * step] if line else src[j + k * step]
            for k in cl.unroll(range(ilp)):
                acc = fold(op, T, E, acc, vals[k])
            j += ilp * step
    while j < stop:
        acc = fold(op, T, E, acc, src[row, j] if line else src[j])
        j += step
    return acc


@cl.func
def fold_atomic(op: int, T: cl.DType, out: Array[Any], v: Any) -> None:
    """Fold the cube's value ``v`` into ``out[0]`` with the atomic of ``op`` (see :func:`atomic_ok`).

    A NaN (max and min propagate it) is stored with an exchange: an atomic max or min never stores
    it (every comparison with NaN is false), and for the same reason none replaces it later."""
    if op == SUM:
        cl.atomic_add(out, 0, v)
    elif T.is_float and is_nan(v):
        cl.atomic_exchange(out, 0, v)
    elif op == MAX:
        cl.atomic_max(out, 0, v)
    else:
        cl.atomic_min(out, 0, v)


@cl.func
def cube_reduce(
    op: int, T: cl.DType, E: cl.DType, x: Array[Any], items: Any, xs: Array[Any], n: Any, out: Array[Any],
    atomic: bool, ilp: int,
) -> None:
    """Fold the cube's grid-stride share of the ``n`` elements into its partial ``out[CUBE_POS_X]``,
    or (``atomic``) into ``out[0]`` with the atomic of ``op``: the body of the four kernels below.

    ``x`` holds ``items`` elements of type ``E``: the scalars themselves (``x`` is ``xs``), or
    ``Vec[T, 4]`` vectors over the first ``4 * items`` scalars of ``xs``, whose last ``n % 4`` unit 0
    of cube 0 adds. ``ilp`` loads per unit are in flight at once (:func:`fold_range`). A unit
    without elements keeps the :func:`~cubeplug.std.combine.start` value (for max/min ``xs[0]``).
    """
    buf = cl.shared(T, CUBE)
    acc = fold_range(op, T, E, start(op, T, xs, 0, False), x, 0, False, cl.ABSOLUTE_POS_X, items,
                     cl.CUBE_DIM_X * cl.CUBE_COUNT_X, ilp)
    if E.lanes == 4:  # noqa: SIM102 (a comptime branch around a runtime one: folded when lowered)
        if cl.ABSOLUTE_POS_X == 0:
            for j in range(items * 4, n):
                acc = combine(op, T, acc, xs[j])
    buf[cl.UNIT_POS_X] = acc
    cube_tree(op, T, buf)
    if cl.UNIT_POS_X == 0:
        if atomic:
            fold_atomic(op, T, out, buf[0])
        else:
            out[cl.CUBE_POS_X] = buf[0]


@cl.kernel
def reduce_pass(
    x: Array[T], out: Array[T], n: u32, OP: Comptime[int], ILP: Comptime[int], T: Comptime[cl.DType],  # type: ignore[name-defined]  # noqa: F821
) -> None:
    """One partial per cube: ``out[CUBE_POS_X]``; scalar loads."""
    cube_reduce(OP, T, T, x, n, x, n, out, False, ILP)


@cl.kernel
def reduce_pass_vec(
    x4: Array[V], x: Array[T], out: Array[T], n: u32, OP: Comptime[int], ILP: Comptime[int],  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType], V: Comptime[cl.DType],
) -> None:
    """One partial per cube: ``out[CUBE_POS_X]``; ``V`` (``Vec[T, 4]``) loads through ``x4``, a view
    of the first ``4 * (n // 4)`` elements of ``x``."""
    cube_reduce(OP, T, V, x4, n >> 2, x, n, out, False, ILP)


@cl.kernel
def reduce_atomic(
    x: Array[T], out: Array[cl.Atomic[T]], n: u32, OP: Comptime[int], ILP: Comptime[int],  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType],
) -> None:
    """Every cube folds its value into ``out[0]`` atomically (``out`` holds the identity first)."""
    cube_reduce(OP, T, T, x, n, x, n, out, True, ILP)


@cl.kernel
def reduce_atomic_vec(
    x4: Array[V], x: Array[T], out: Array[cl.Atomic[T]], n: u32, OP: Comptime[int], ILP: Comptime[int],  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType], V: Comptime[cl.DType],
) -> None:
    """:func:`reduce_atomic` with ``V`` loads, as :func:`reduce_pass_vec`."""
    cube_reduce(OP, T, V, x4, n >> 2, x, n, out, True, ILP)


#: Loads in flight per unit of every candidate but ``tree_x16`` (the hand-written loops kept four).
ILP = 4


def resident_cubes(client: Any) -> int:
    """Cubes that fill the device once: 8 per compute unit (SM) when the device says how many it has."""
    props = client.properties
    units = props.get("sm_count") or props.get("compute_units") or 128
    return 8 * int(units)


def _bind(x: Handle, n: int, vector: bool) -> tuple[tuple[Handle, ...], int]:
    """The input bindings of a first pass and how many load items (scalars or vectors) there are."""
    if vector:
        n4 = n >> 2
        return (checks.prefix(x, n4 * 16), x), n4  # VECTOR_DTYPES are 4-byte: 16 B a vector
    return (x,), n


class Strategy:
    """One candidate: ``per_unit`` load items per unit before the grid-stride loop wraps (which sets
    the cube count), ``ilp`` loads in flight, scalar or ``Vec[T, 4]`` loads; then either a partial
    per cube and one cube over the partials (``atomic`` False; ``resident`` caps the first pass at
    one wave of the device), or every cube's value folded into the result atomically."""

    def __init__(self, op: int, name: str, per_unit: int, ilp: int, vector: bool = False,
                 atomic: bool = False, resident: bool = False) -> None:
        self.op, self.name, self.per_unit, self.ilp = op, name, per_unit, ilp
        self.vector, self.atomic, self.resident = vector, atomic, resident
        self.size = DTYPES[name].itemsize
        T = lang_type(name)
        # The comptime values, built once: the launch path only binds handles and counts.
        self.comptime = {"OP": op, "ILP": ilp, "T": T}
        if vector:
            self.comptime["V"] = lang_type(f"{name}x4")
        self.kernel = (reduce_atomic_vec if vector else reduce_atomic) if atomic else (
            reduce_pass_vec if vector else reduce_pass)
        self.start = identity(op, name)  # a numpy scalar of the dtype: the launch takes it as is

    def cubes(self, client: Any, items: int) -> int:
        """Cubes of the first pass over ``items`` load items."""
        if self.resident:
            return checks.capped_groups(items, CUBE * self.per_unit, resident_cubes(client), CUBE)
        return checks.groups(items, CUBE * self.per_unit)

    def __call__(self, client: Any, x: Handle, n: int) -> Handle:
        bound, items = _bind(x, n, self.vector)
        cubes = self.cubes(client, items)
        if self.atomic:
            # The identity written by a kernel, not uploaded (a host copy would wait for the device),
            # and launched directly: fill's checks would be per-call work on values known here.
            out: Handle = client.empty(self.size)
            fill_scalar.launch_unchecked(client, CubeCount(1), CUBE, out, self.start, 1, T=self.comptime["T"])
            self.kernel.launch_unchecked(client, CubeCount(cubes), CUBE, *bound, out, n, **self.comptime)
            return out
        out = client.empty(self.size * cubes)
        self.kernel.launch_unchecked(client, CubeCount(cubes), CUBE, *bound, out, n, **self.comptime)
        if cubes == 1:
            return out
        # One cube over the partials (at most MAX_GROUPS of them: 256 per unit), as the hand-written
        # second pass: one launch more, not a chain of them.
        total: Handle = client.empty(self.size)
        reduce_pass.launch_unchecked(client, CubeCount(1), CUBE, out, total, cubes, OP=self.op, ILP=ILP,
                                     T=self.comptime["T"])
        return total


def atomic_ok(op: int, name: str) -> bool:
    """True when the language has the atomic that ``op`` on ``name`` needs (f32 max and min are
    compare-and-swap loops on the bits in every dialect)."""
    return op in (SUM, MAX, MIN) and name in ("f32", "i32", "u32")


def reduce_key(client: Any, level: str, x: Handle, n: int) -> AutotuneKey:
    """The tuning key: the anchored count, and whether 16-byte vector loads are possible (an aligned
    view of at least 4 elements): the vector candidates apply only then."""
    return AutotuneKey(("n", anchor(n, level, checks.MAX_ELEMENTS)), ("vec", checks.vector_ok(x, n)))


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
        # Float sums and products: the order of the operations differs; allow its rounding (of a
        # sum: relative to the sum of magnitudes, which bounds it under cancellation).
        scale = abs(float(want)) + 1.0
        if op == SUM:
            host = client.to_numpy(checks.prefix(x, n * dt.itemsize), name)
            scale = float(np.abs(host).sum(dtype=np.float64)) + 1.0
        tol = 1e-2 if name == "f16" else 1e-4
        return None if abs(float(have) - float(want)) <= tol * scale * np.log2(n + 2) else (
            f"{have!r}, reference {want!r}")

    def vector(client: Any, key: AutotuneKey) -> bool:
        return bool(key["vec"])

    def has_atomics(client: Any, key: AutotuneKey) -> bool:
        return bool(client.capabilities.atomics)

    def vector_atomics(client: Any, key: AutotuneKey) -> bool:
        return bool(key["vec"]) and bool(client.capabilities.atomics)

    # Names of the hand-written candidates they replaced (bench/reference/hand_reduce.py) where the
    # strategy is the same: tree, vec4*, atomic_vec4_x16; tree_x16_ilp4 and atomic_x16_ilp4 are
    # hand-written tree_x16 and atomic_x16 (whose loops kept four loads in flight).
    tunables = [
        Tunable("tree", Strategy(op, name, 1, ILP), priority=0),
        Tunable("tree_x16", Strategy(op, name, 16, 1), priority=0),
        Tunable("tree_x16_ilp4", Strategy(op, name, 16, ILP), priority=2),
        Tunable("resident_ilp4", Strategy(op, name, 4, ILP, resident=True), priority=1),
    ]
    if atomic_ok(op, name):
        tunables.append(Tunable("atomic_x16_ilp4", Strategy(op, name, 16, ILP, atomic=True), priority=1,
                                applicable=has_atomics))
        # Priority 2 so that the minimal level (the quick bench) tries it: the cpu backend's best.
        tunables.append(Tunable("atomic_x16_ilp1", Strategy(op, name, 16, 1, atomic=True), priority=2,
                                applicable=has_atomics))
    if name in VECTOR_DTYPES:
        for label, per_unit, priority in (("vec4", 1, 1), ("vec4_x4", 4, 2), ("vec4_x16", 16, 2),
                                          ("vec4_x64", 64, 1)):
            tunables.append(Tunable(label, Strategy(op, name, per_unit, ILP, vector=True), priority=priority,
                                    applicable=vector))
        tunables.append(Tunable("vec4_resident", Strategy(op, name, 4, ILP, vector=True, resident=True),
                                priority=2, applicable=vector))
        if atomic_ok(op, name):
            tunables.append(Tunable("atomic_vec4_x16", Strategy(op, name, 16, ILP, vector=True, atomic=True),
                                    priority=1, applicable=vector_atomics))
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
