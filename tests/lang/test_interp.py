"""The lockstep interpreter: barrier divergence at run time, cube batching, IR text."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import lang as cl
from cubeplug.lang import Array, BarrierDivergenceError, f32, f32x4, interp, u32
from cubeplug.lang.interp_memory import Lanes
from cubeplug.lang.lower import Lowerer


class Launch:
    def __init__(self, count: tuple[int, int, int], dims: tuple[int, int, int]) -> None:
        self.count, self.cube_dim = count, dims


@cl.kernel
def divergent(y: Array[f32]):
    if cl.UNIT_POS < 4:
        cl.sync_cube()
    y[cl.UNIT_POS] = 1.0


@cl.kernel
def neighbours(y: Array[f32]):
    """Each unit writes its id to shared memory, syncs, then reads its right neighbour's."""
    buf = cl.shared(f32, 32)
    buf[cl.UNIT_POS] = f32(cl.UNIT_POS)
    cl.sync_cube()
    y[cl.ABSOLUTE_POS] = buf[(cl.UNIT_POS + 1) % 32]


def test_divergent_barrier_raises_at_run_time() -> None:
    # The verifier rejects this kernel; lowering alone and interpreting shows the run-time check.
    low = Lowerer(divergent.captured, "divergent", {}, (32, 1, 1), True, None).kernel()
    run = interp.Interpreter(low.ir)
    with pytest.raises(BarrierDivergenceError, match="only some units"):
        run(Launch((1, 1, 1), (32, 1, 1)), np.zeros(32, np.float32), np.uint32(32))


@cl.kernel
def some_cubes(y: Array[f32]):
    """Cubes past the third skip the barrier (a uniform condition): not a divergence."""
    buf = cl.shared(f32, 32)
    if cl.CUBE_POS_X < 3:
        buf[cl.UNIT_POS] = f32(cl.CUBE_POS_X)
        cl.sync_cube()
        y[cl.ABSOLUTE_POS] = buf[31 - cl.UNIT_POS]


def test_cubes_skipping_a_barrier_in_a_batch_are_not_divergent() -> None:
    spec = some_cubes.specialize_for("python", None, 32, True, {})
    y = np.full(5 * 32, -1.0, np.float32)
    spec.source(Launch((5, 1, 1), (32, 1, 1)), y, np.uint32(len(y)))  # one batch of 5 cubes
    np.testing.assert_array_equal(y, np.r_[np.repeat(np.arange(3.0), 32), np.full(64, -1.0)])


def test_shared_memory_is_per_cube_across_batches(monkeypatch: Any) -> None:
    monkeypatch.setattr(interp, "LANES", 64)  # two cubes per batch
    spec = neighbours.specialize_for("python", None, 32, True, {})
    y = np.zeros(5 * 32, np.float32)
    spec.source(Launch((5, 1, 1), (32, 1, 1)), y, np.uint32(len(y)))
    np.testing.assert_array_equal(y, np.tile((np.arange(32) + 1) % 32, 5))


def test_ir_text_golden() -> None:
    from tests.lang.kernels import axpy

    assert axpy.ir(256) == (
        "kernel axpy(x: Array[f32], y: Array[f32] rw, %a: f32, %len_x: u32, %len_y: u32) "
        "cube_dim=(256, 1, 1) checked\n"
        "  var i: u32\n"
        "  i = ((ABSOLUTE_POS_X + (ABSOLUTE_POS_Y * (CUBE_COUNT_X * 256:u32))) + "
        "(ABSOLUTE_POS_Z * ((CUBE_COUNT_X * 256:u32) * CUBE_COUNT_Y)))\n"
        "  if (i < %len_y):\n"
        "    y[i?] = (y[i?] + (%a * x[i?]))\n"
    )
    unchecked = axpy.ir(256, checked=False)
    assert "len_x" not in unchecked and "y[i] = (y[i] + (%a * x[i]))" in unchecked


def run_sparse(count: int) -> list[np.ndarray]:
    from tests.lang.batched_kernels import sparse

    rng = np.random.default_rng(3)
    n = 32 * count
    arrays = [rng.uniform(-1, 2, n).astype(np.float32), np.zeros(n, np.float32), np.zeros((n, 4), np.float32),
              np.zeros(4, np.uint32), np.zeros(n, np.float32)]
    spec = sparse.specialize_for("python", None, 32, True, {})
    hidden = [np.uint32(len(arrays[[p.name for p in spec.ir.arrays].index(h.array)])) for h in spec.ir.hidden]
    spec.source(Launch((count, 1, 1), (32, 1, 1)), *arrays, *hidden)
    return arrays


@pytest.mark.parametrize("compact", [0.25, 1.0])
def test_branches_on_few_lanes_match_every_lane(monkeypatch: Any, compact: float) -> None:
    monkeypatch.setattr(interp, "COMPACT", 0.0)  # the general path: masked statements over every lane
    want = run_sparse(7)
    monkeypatch.setattr(interp, "COMPACT", compact)
    for got, expected in zip(run_sparse(7), want):
        np.testing.assert_array_equal(got, expected)
    assert want[3].sum() == 7 * 2 and (want[1] != 0).sum() > 7  # the branches ran
    # unit 31 took the branch in all three passes of its loop, each adding to what the last left
    np.testing.assert_allclose(want[4][31::32], want[0].reshape(7, 32)[:, :3].sum(axis=1) + 3, rtol=1e-6)


@pytest.mark.parametrize("checked", [False, True])
@pytest.mark.parametrize("compact", [0.0, 0.25])
def test_a_local_read_only_as_a_lane_crosses_branches_of_few_lanes(
    monkeypatch: Any, compact: float, checked: bool
) -> None:
    from tests.lang.batched_kernels import lane_from_a_branch

    monkeypatch.setattr(interp, "COMPACT", compact)
    x = np.arange(1, 65, dtype=np.float32)
    out = np.zeros((64, 4), np.float32)
    spec = lane_from_a_branch.specialize_for("python", None, 32, checked, {})
    lengths = (np.uint32(64), np.uint32(64)) if checked else ()
    spec.source(Launch((2, 1, 1), (32, 1, 1)), x, out, np.uint32(3), *lengths)
    want = np.zeros((64, 4), np.float32)
    i = np.arange(64)
    want[i[i % 8 == 0], (i[i % 8 == 0] + 3) % 4] = x[i % 8 == 0]
    want[i[i % 8 == 1], 2] = x[i % 8 == 1]
    rest = (i % 8 != 0) & (i % 8 != 1)
    want[i[rest], 0] = x[rest]
    np.testing.assert_array_equal(out, want)


def test_a_loop_started_from_memory_keeps_its_start_when_the_body_stores_there() -> None:
    from tests.lang.batched_kernels import loop_from_memory

    idx = np.arange(64, dtype=np.uint32)
    y = np.zeros(64, np.float32)
    spec = loop_from_memory.specialize_for("python", None, 32, False, {})
    spec.source(Launch((2, 1, 1), (32, 1, 1)), idx, y)
    np.testing.assert_array_equal(y, np.arange(64, dtype=np.float32))
    assert (idx == 100).all()


@pytest.mark.parametrize("aliased", [False, True])
def test_a_loaded_local_keeps_its_value_when_memory_changes(aliased: bool) -> None:
    # The interpreter keeps views of loaded arrays in locals when nothing the kernel writes
    # overlaps them; y bound to x's memory must make it copy.
    from tests.lang.batched_kernels import keep_loaded

    x = np.arange(64, dtype=np.float32)
    y = x if aliased else np.zeros(64, np.float32)
    spec = keep_loaded.specialize_for("python", None, 32, False, {})
    spec.source(Launch((2, 1, 1), (32, 1, 1)), x, y)
    np.testing.assert_array_equal(y, 2 * np.arange(64, dtype=np.float32) + 1)


@pytest.mark.parametrize("words", [(1, 2, 3, 4), (7, 7, 7, 7), (1, 2, 1, 2), (0x7FC00001, 0, 0x7FC00001, 0),
                                   (0xFFFF0001, 0xFFFF0001, 0xFFFF0001, 0xFFFF0001)])
def test_a_repeated_vector_store_writes_every_row_bit_for_bit(words: tuple[int, ...]) -> None:
    from tests.lang.batched_kernels import splat

    out = np.zeros((96, 4), np.uint32)
    spec = splat.specialize_for("python", None, 32, False, {})
    spec.source(Launch((3, 1, 1), (32, 1, 1)), out, *(np.uint32(w) for w in words))
    np.testing.assert_array_equal(out, np.tile(np.array(words, np.uint32), (96, 1)))


def test_shared_memory_through_tiles_matches_gathers(monkeypatch: Any) -> None:
    # UNIT_POS_X is a Tile (per-cube ramp): shared accesses through it are strided views; with it
    # materialized, the same kernel runs through gathers and scatters.
    from cubeplug.lang import lanes
    from tests.lang.batched_kernels import tiles

    def run() -> np.ndarray:
        x = np.random.default_rng(5).uniform(-1, 1, 32 * 9).astype(np.float32)
        y = np.zeros_like(x)
        spec = tiles.specialize_for("python", None, 32, True, {})
        hidden = [np.uint32(len(x) if h.array == "x" else len(y)) for h in spec.ir.hidden]
        spec.source(Launch((9, 1, 1), (32, 1, 1)), x, y, *hidden)
        return y

    fast = run()
    position = lanes.position
    monkeypatch.setattr(lanes, "position", lambda *a: lanes.materialize(position(*a)))
    np.testing.assert_array_equal(fast, run())
    assert isinstance(position("UNIT_POS_X", (9, 1, 1), (32, 1, 1), 0, 9), lanes.Tile)


@cl.kernel
def blocks(y: Array[f32], x: Array[f32], z: Array[f32], n: u32):
    """Global accesses through ``CUBE_POS * 64 + k * 16 + UNIT_POS`` (strided views where every
    lane is in bounds, a gather or a scatter where some are not) and a store that lanes of
    neighbouring cubes share (a scatter: the last lane's write)."""
    base = cl.CUBE_POS * 64
    u = cl.UNIT_POS_X
    for k in cl.unroll(range(4)):
        y[base + k * 16 + u] = x[base + k * 16 + u] * 2.0 + f32(k)
    z[cl.CUBE_POS * 8 + u] = f32(u) + f32(cl.CUBE_POS) * 100.0  # cube c's units 8.. are c + 1's 0..
    y[base + 7 * u + 1] = y[base + 7 * u + 1] + 100.0  # overlapping rows of cubes


def _blocks_numpy(x: np.ndarray, ylen: int, zlen: int, cubes: int) -> tuple[np.ndarray, np.ndarray]:
    y = np.zeros(ylen, np.float32)
    z = np.zeros(zlen, np.float32)
    for c in range(cubes):
        for k in range(4):
            for u in range(16):
                i = c * 64 + k * 16 + u
                if i < ylen:
                    y[i] = (x[i] if i < len(x) else 0) * np.float32(2) + np.float32(k)
        for u in range(16):
            if c * 8 + u < zlen:
                z[c * 8 + u] = u + 100 * c
    for c in range(cubes):  # lockstep: every lane loads before any stores
        idx = [c * 64 + 7 * u + 1 for u in range(16)]
        vals = [y[i] + np.float32(100) if i < ylen else 0 for i in idx]
        for i, v in zip(idx, vals, strict=True):
            if i < ylen:
                y[i] = v
    return y, z


@pytest.mark.parametrize(("xlen", "ylen"), [(5 * 64, 5 * 64), (5 * 64 - 3, 5 * 64 - 5)])
def test_tile_addresses_of_global_memory_match_numpy(xlen: int, ylen: int,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    # The accesses through tiles take strided views (counted), and give numpy's result.
    views: list[bool] = []
    strided = Lanes.strided

    def counted(self: Lanes, *args: Any) -> Any:
        view = strided(self, *args)
        views.append(view is not None)
        return view

    monkeypatch.setattr(Lanes, "strided", counted)
    spec = blocks.specialize_for("python", None, 16, True, {})
    x = np.arange(xlen, dtype=np.float32)
    y, z = np.zeros(ylen, np.float32), np.zeros(5 * 8 + 8 - (xlen % 2), np.float32)
    spec.source(Launch((5, 1, 1), (16, 1, 1)), y, x, z, np.uint32(xlen), np.uint32(ylen), np.uint32(xlen),
                np.uint32(len(z)))
    want_y, want_z = _blocks_numpy(x, ylen, len(z), 5)
    np.testing.assert_array_equal(y, want_y)
    np.testing.assert_array_equal(z, want_z)
    assert any(views), "no access through a tile took a strided view"


@cl.kernel
def unit_tree(y: Array[f32], x: Array[f32], idx: Array[u32], v4: Array[f32x4]):
    """A halving tree of (value, index) pairs in shared memory (``if u < half``: units of every
    cube), a branch with an else on ``u >= 3``, a vector local and a private array assigned under
    them, the ramp ``ABSOLUTE_POS_X`` and the tile ``CUBE_POS_X`` read in them."""
    bv = cl.shared(f32, 16)
    bi = cl.shared(u32, 16)
    priv = cl.local(f32, 2)
    u = cl.UNIT_POS_X
    i = cl.ABSOLUTE_POS_X
    bv[u] = x[i]
    bi[u] = i
    vec = cl.Vec[f32, 4](x[i], 1.0, 2.0, 3.0)
    priv[0] = x[i]
    priv[1] = 0.0
    cl.sync_cube()
    for k in cl.unroll(range(4)):
        half = 8 >> k
        if u < half:
            ov = bv[u + half]
            oi = bi[u + half]
            if ov > bv[u] or (ov == bv[u] and oi < bi[u]):
                bv[u] = ov
                bi[u] = oi
        cl.sync_cube()
    if u >= 3:
        vec = cl.Vec[f32, 4](bv[0], f32(i), f32(cl.CUBE_POS_X), priv[0])
        priv[1] = f32(u)
    else:
        vec = cl.Vec[f32, 4](-1.0, f32(u), 0.0, 0.0)
    if u == 0:
        idx[cl.CUBE_POS_X] = bi[0]
    y[i] = priv[1]
    v4[i] = vec


def run_unit_tree(cubes: int) -> list[np.ndarray]:
    rng = np.random.default_rng(5)
    n = 16 * cubes
    x = rng.integers(0, 6, n).astype(np.float32)  # ties: the lower index wins
    arrays = [np.zeros(n, np.float32), x, np.zeros(cubes, np.uint32), np.zeros((n, 4), np.float32)]
    spec = unit_tree.specialize_for("python", None, 16, True, {})
    hidden = [np.uint32(len(arrays[[p.name for p in spec.ir.arrays].index(h.array)])) for h in spec.ir.hidden]
    spec.source(Launch((cubes, 1, 1), (16, 1, 1)), *arrays, *hidden)
    return arrays


def test_branches_on_units_of_every_cube_match_every_lane(monkeypatch: Any) -> None:
    monkeypatch.setattr(interp, "COMPACT", 0.0)  # the general path: masked statements over every lane
    want = run_unit_tree(9)
    monkeypatch.setattr(interp, "COMPACT", 0.25)
    for got, expected in zip(run_unit_tree(9), want, strict=True):
        np.testing.assert_array_equal(got, expected)
    x = want[1].reshape(9, 16)
    np.testing.assert_array_equal(want[2], np.argmax(x, axis=1) + np.arange(9) * 16)
    units = np.where(np.arange(16) >= 3, np.arange(16), 0)
    np.testing.assert_array_equal(want[0].reshape(9, 16), np.broadcast_to(units, (9, 16)))
    np.testing.assert_array_equal(want[3][16 + 5], [x[1].max(), 21, 1, x[1, 5]])
    np.testing.assert_array_equal(want[3][16 + 2], [-1, 2, 0, 0])


@cl.kernel
def tile_plus_one(y: Array[f32], x: Array[f32]):
    i = cl.CUBE_POS * 16 + cl.UNIT_POS_X
    y[i] = x[i] + 1.0


def test_a_tile_store_stays_inside_a_view_that_ends_mid_cube() -> None:
    # The strided views of tile accesses are built on raw memory (as_strided): a view of 79 of 100
    # elements must not be read or written past its end (the last cube's units 15.. are out).
    big = np.arange(100, dtype=np.float32)
    y = np.zeros(100, np.float32)
    spec = tile_plus_one.specialize_for("python", None, 16, True, {})
    hidden = [np.uint32(79) for _ in spec.ir.hidden]
    spec.source(Launch((5, 1, 1), (16, 1, 1)), y[:79], big[:79], *hidden)
    np.testing.assert_array_equal(y[:79], big[:79] + 1)
    assert (y[79:] == 0).all()


@cl.kernel
def reversed_tiles(y: Array[f32], x: Array[f32]):
    u = cl.UNIT_POS_X
    base = cl.CUBE_POS * 16
    y[base + 15 - u] = x[base + u]
    if u >= 4:
        y[base + u - 4] = y[base + u - 4] + x[base + 19 - u]


def test_tiles_with_a_negative_step_match_gathers(monkeypatch: Any) -> None:
    from cubeplug.lang import lanes

    def run() -> np.ndarray:
        x = np.arange(96, dtype=np.float32)
        y = np.zeros(96, np.float32)
        spec = reversed_tiles.specialize_for("python", None, 16, True, {})
        hidden = [np.uint32(96) for _ in spec.ir.hidden]
        spec.source(Launch((6, 1, 1), (16, 1, 1)), y, x, *hidden)
        return y

    fast = run()
    x = np.arange(96, dtype=np.float32)
    want = np.zeros(96, np.float32)
    for c in range(6):
        b = c * 16
        want[b : b + 16] = x[b : b + 16][::-1]
        for u in range(4, 16):
            want[b + u - 4] += x[b + 19 - u] if b + 19 - u < 96 else 0
    np.testing.assert_array_equal(fast, want)
    position = lanes.position
    monkeypatch.setattr(lanes, "position", lambda *a: lanes.materialize(position(*a)))
    monkeypatch.setattr(interp, "COMPACT", 0.0)
    np.testing.assert_array_equal(run(), want)
