"""The register-blocked matmul kernel of :mod:`cubeplug.std.matmul`, written once in cubeplug.lang.

(BN / TN) x (BM / TM) units compute a BM x BN block of C, each unit a TM x TN patch held in
registers. Per step of BK along k, the cube stages a BM x BK tile of A and a BK x BN tile of B in
shared memory; every unit then reads TM / W + TN / W values of shared memory per row of the step
for TM * TN multiply-adds.

Comptime values: ``T`` the element type, ``ACC`` the accumulator type (f32 for f16), ``V`` =
``Vec[ACC, W]`` (W = 4, or 1 for f64: no vectors, the same source then holds scalars), ``TV`` =
``Vec[T, W]``, ``IO`` = ``Vec[T, VIO]`` (VIO = 4: 4-lane loads and stores of global memory, k and
n multiples of 4; f16 lanes converted to and from ACC in registers), ``IX`` the arithmetic of the
shared tiles' indices (u32 or i32: ``RegBlock.index``), the block shape, and ``STAGES``:

* ``STAGES = 1``: load the tiles, sync, multiply, sync (two barriers a step), as the hand kernels did.
* ``STAGES = 2``: double-buffered: the next step's tiles are loaded from global memory into
  registers before the current step is multiplied, and stored into the other shared buffer after
  it; one barrier a step, and the global loads' latency hidden behind the multiply-adds.

A's tile is stored transposed (``a_tile[p, rows]``) so that its reads are vectors too: element
``(p, r)`` is lane ``r % W`` of ``a_tile[p * BM / W + r / W]``. A unit's rows are
``(gi * TY + ty) * W + q`` (gi < TM / W, q < W) and its columns ``(gj * TX + tx) * W + j``, so
neighbouring units read neighbouring vectors of shared memory.

``AQ`` picks how A's tile is staged: 0, one TV of W rows of a column (scalar loads); 1, 4 x 4
squares (four float4 rows a task, transposed in registers, stored as four V); 2, one float4 of a
row a task, its lanes stored one by one into four rows of ``a_tile`` (``a_tile[i][r % 4] = v``), as
the hand-written kernels staged it. Every path converts T to ACC in :func:`stash` only.
"""

from __future__ import annotations

from typing import Any

from cubeplug import lang as cl
from cubeplug.lang import Array, Comptime, u32


# The helpers branch with statements, not ``x if c else y``: both sides of a conditional
# expression are lowered, and the side not taken would not type-check (a lane of a scalar).
@cl.func
def lane(v: Any, q: int, W: int) -> Any:
    """Lane ``q`` of a ``W``-lane value (the value itself when ``W`` is 1: ``Vec[T, 1]`` is ``T``)."""
    if W == 1:  # noqa: SIM108
        r = v
    else:
        r = v[q]
    return r


@cl.func
def pack(V: cl.DType, W: int, x: Array[Any]) -> Any:
    """The ``W``-lane value ``V`` of ``x[0:W]`` (a local array)."""
    if W == 1:  # noqa: SIM108
        r = x[0]
    else:
        r = V(x[0], x[1], x[2], x[3])
    return r


@cl.func
def mad(ACC: cl.DType, acc: Array[Any], z: int, a: Any, b: Any) -> None:
    """``acc[z] += a * b``, as an fma for floats: in C a vector operation is a helper function,
    and clang (PoCL) contracts a multiply and an add only within one expression, so the two
    helpers of ``acc[z] += a * b`` would stay two instructions a lane."""
    if ACC.is_float:
        acc[z] = cl.fma(a, b, acc[z])
    else:
        acc[z] += a * b


@cl.func
def fetch(
    a: Array[Any], b: Array[Any], m: Any, n: Any, k: Any, t: Any, row0: Any, col0: Any, tid: Any,
    sa: Array[Any], sb: Array[Any], x: Array[Any], quad: Array[Any],
    T: cl.DType, TV: cl.DType, IO: cl.DType, AIO: cl.DType, W: int, VIO: int, AQ: int, BN: int,
    BK: int, NT: int, A_TASKS: int, B_TASKS: int,
) -> None:
    """Load this unit's share of the step at ``t`` from global memory into the registers ``sa`` (A:
    one TV a task, four float4s with AQ 1, one with AQ 2) and ``sb`` (B: one TV or float4 a task),
    in the loaded type (stash converts); out of the matrices, zeros. (Task counts come as arguments:
    a local assigned in a helper is a runtime value, and unroll needs comptime bounds.)"""
    for j in cl.unroll(range((A_TASKS + NT - 1) // NT)):
        e = tid + j * NT
        if A_TASKS % NT == 0 or e < A_TASKS:
            if AQ == 2:
                # One float4 of a row, as the hand kernels staged A (its lanes stored one by one
                # into four rows of a_tile: see stash).
                gr = row0 + e // (BK // 4)
                gc = t + 4 * (e % (BK // 4))
                sa[j] = a[(gr * k + gc) >> 2] if gr < m and gc < k else AIO(0)
            elif AQ == 0:
                # W rows of one column: one TV for a_tile's row p = e % BK (scalar loads).
                gc = t + e % BK
                for i in cl.unroll(range(W)):
                    gr = row0 + (e // BK) * W + i
                    x[i] = a[gr * k + gc] if gr < m and gc < k else T(0)
                sa[j] = pack(TV, W, x)
            else:
                # A 4 x 4 square (four float4 rows), transposed in registers. Which staging wins
                # depends on the block (H200, CUDA, lang / hand speed): BK = 8 reg_8x8_vec 0.72
                # with squares, 0.96 scalar; BK = 16 reg_8x8_vec_db16 1.13 with squares, 0.82 scalar.
                gc = t + 4 * (e % (BK // 4))
                for i in cl.unroll(range(4)):
                    gr = row0 + (e // (BK // 4)) * 4 + i
                    quad[i] = a[(gr * k + gc) >> 2] if gr < m and gc < k else AIO(0)
                for i in cl.unroll(range(4)):
                    sa[4 * j + i] = AIO(quad[0][i], quad[1][i], quad[2][i], quad[3][i])
    for j in cl.unroll(range((B_TASKS + NT - 1) // NT)):
        e = tid + j * NT
        if B_TASKS % NT == 0 or e < B_TASKS:
            gr = t + e // (BN // W)
            if VIO == 1:
                for i in cl.unroll(range(W)):
                    gc = col0 + (e % (BN // W)) * W + i
                    x[i] = b[gr * n + gc] if gr < k and gc < n else T(0)
                sb[j] = pack(TV, W, x)
            else:
                gc = col0 + 4 * (e % (BN // 4))
                sb[j] = b[(gr * n + gc) >> 2] if gr < k and gc < n else IO(0)


@cl.func
def stash(
    a_tile: Array[Any], b_tile: Array[Any], buf: Any, tid: Any, sa: Array[Any], sb: Array[Any],
    ACC: cl.DType, V: cl.DType, IX: cl.DType, W: int, AQ: int, BM: int, BN: int, BK: int, NT: int,
    A_TASKS: int, B_TASKS: int,
) -> None:
    """Store the registers :func:`fetch` filled into shared buffer ``buf`` (A transposed; ``buf`` and
    the tiles' indices in ``IX``), converting
    f16 lanes to the accumulator type here on every staging path, not at the load: a conversion
    right after the load waits for it, so the double-buffered kernels' loads would no longer be in
    flight during the multiply-adds (on Vulkan, H100: f16 ``reg_8x8_vec_db16`` 5.1 ms converting
    at the load, where f32 takes 3.5)."""
    for j in cl.unroll(range((A_TASKS + NT - 1) // NT)):
        e = tid + j * NT
        if A_TASKS % NT == 0 or e < A_TASKS:
            if AQ == 2:
                # Lane i of row r's float4 is element (p, r) = (4q + i, r): lane r % 4 of a_tile's
                # vector (4q + i) * BM / 4 + r / 4 (neighbouring units, neighbouring rows, write
                # neighbouring lanes).
                r = e // (BK // 4)
                q = IX(e % (BK // 4))
                for i in cl.unroll(range(4)):
                    a_tile[buf * (BK * BM // 4) + (4 * q + i) * (BM // 4) + IX(r // 4)][r % 4] = ACC(sa[j][i])
            elif AQ == 0:
                a_tile[buf * (BK * BM // W) + IX(e % BK) * (BM // W) + IX(e // BK)] = V(sa[j])
            else:
                for i in cl.unroll(range(4)):
                    row = (4 * IX(e % (BK // 4)) + i) * (BM // 4) + IX(e // (BK // 4))
                    a_tile[buf * (BK * BM // 4) + row] = V(sa[4 * j + i])
    for j in cl.unroll(range((B_TASKS + NT - 1) // NT)):
        e = tid + j * NT
        if B_TASKS % NT == 0 or e < B_TASKS:
            b_tile[buf * (BK * BN // W) + IX(e)] = V(sb[j])


@cl.func
def multiply(
    a_tile: Array[Any], b_tile: Array[Any], buf: Any, tx: Any, ty: Any, acc: Array[Any],
    av: Array[Any], bv: Array[Any], ACC: cl.DType, W: int, BM: int, BN: int, BK: int, TM: int,
    TN: int,
) -> None:
    """Add the product of shared buffer ``buf``'s tiles to this unit's patch ``acc`` (``buf``,
    ``tx`` and ``ty`` in the arithmetic of the tiles' indices, matmul_reg's ``IX``)."""
    for p in cl.unroll(range(BK)):
        for gi in cl.unroll(range(TM // W)):
            av[gi] = a_tile[buf * (BK * BM // W) + p * (BM // W) + gi * (BM // TM) + ty]
        for gj in cl.unroll(range(TN // W)):
            bv[gj] = b_tile[buf * (BK * BN // W) + p * (BN // W) + gj * (BN // TN) + tx]
        for gi in cl.unroll(range(TM // W)):
            for q in cl.unroll(range(W)):
                s = lane(av[gi], q, W)
                for gj in cl.unroll(range(TN // W)):
                    mad(ACC, acc, (gi * W + q) * (TN // W) + gj, s, bv[gj])


@cl.kernel
def matmul_reg(
    a: Array[AIO], b: Array[IO], c: Array[IO], m: u32, n: u32, k: u32,  # type: ignore[name-defined]  # noqa: F821
    T: Comptime[cl.DType], ACC: Comptime[cl.DType], V: Comptime[cl.DType], TV: Comptime[cl.DType],
    IO: Comptime[cl.DType], W: Comptime[int], VIO: Comptime[int], BM: Comptime[int], BN: Comptime[int],
    BK: Comptime[int], TM: Comptime[int], TN: Comptime[int], STAGES: Comptime[int],
    AIO: Comptime[cl.DType], AQ: Comptime[int], IX: Comptime[cl.DType],
) -> None:
    """``c = a @ b``, register-blocked (see the module docstring)."""
    TX = BN // TN
    NT = TX * (BM // TM)
    # Staging tasks a step: A in W-row columns (AQ 0), 4 x 4 squares of float4s (AQ 1) or float4s
    # (AQ 2); B in V values.
    A_TASKS = (BM // W) * BK if AQ == 0 else (BM // 4) * (BK // 4) if AQ == 1 else BM * (BK // 4)
    B_TASKS = BK * (BN // W)
    a_tile = cl.shared(V, STAGES * BK * BM // W)
    b_tile = cl.shared(V, STAGES * BK * BN // W)
    tx = cl.UNIT_POS_X
    ty = cl.UNIT_POS_Y
    tid = ty * TX + tx
    # The units' position in IX, the arithmetic of the shared tiles' indices (module docstring).
    sx = IX(tx)
    sy = IX(ty)
    row0 = cl.CUBE_POS_Y * BM
    col0 = cl.CUBE_POS_X * BN
    acc = cl.local(V, TM * TN // W)
    for z in cl.unroll(range(TM * TN // W)):
        acc[z] = V(0)
    av = cl.local(V, TM // W)
    bv = cl.local(V, TN // W)
    x = cl.local(T, 4)
    quad = cl.local(AIO, 4)
    # Fetched registers keep the loaded type (f16 lanes stay f16 until stash converts them).
    sa = cl.local(TV if AQ == 0 else AIO, (4 if AQ == 1 else 1) * ((A_TASKS + NT - 1) // NT))
    sb = cl.local(IO if VIO == 4 else TV, (B_TASKS + NT - 1) // NT)
    if STAGES == 1:
        for t in range(0, k, BK):
            fetch(a, b, m, n, k, t, row0, col0, tid, sa, sb, x, quad,
                  T, TV, IO, AIO, W, VIO, AQ, BN, BK, NT, A_TASKS, B_TASKS)
            stash(a_tile, b_tile, IX(0), tid, sa, sb, ACC, V, IX, W, AQ, BM, BN, BK, NT, A_TASKS, B_TASKS)
            cl.sync_cube()
            multiply(a_tile, b_tile, IX(0), sx, sy, acc, av, bv, ACC, W, BM, BN, BK, TM, TN)
            cl.sync_cube()
    else:
        if k > 0:
            fetch(a, b, m, n, k, 0, row0, col0, tid, sa, sb, x, quad,
                  T, TV, IO, AIO, W, VIO, AQ, BN, BK, NT, A_TASKS, B_TASKS)
            stash(a_tile, b_tile, IX(0), tid, sa, sb, ACC, V, IX, W, AQ, BM, BN, BK, NT, A_TASKS, B_TASKS)
        cl.sync_cube()
        for t in range(0, k, BK):
            # Buffer t / BK % 2 holds this step; the other one was read a step ago, before the
            # barrier that ended it, so it may take the next step now: one barrier a step.
            cur = (t // BK) % 2
            more = t + BK < k
            if more:
                fetch(a, b, m, n, k, t + BK, row0, col0, tid, sa, sb, x, quad,
                      T, TV, IO, AIO, W, VIO, AQ, BN, BK, NT, A_TASKS, B_TASKS)
            multiply(a_tile, b_tile, IX(cur), sx, sy, acc, av, bv, ACC, W, BM, BN, BK, TM, TN)
            if more:
                stash(a_tile, b_tile, IX(1 - cur), tid, sa, sb, ACC, V, IX, W, AQ, BM, BN, BK, NT, A_TASKS,
                      B_TASKS)
            cl.sync_cube()
    for gi in cl.unroll(range(TM // W)):
        for q in cl.unroll(range(W)):
            row = row0 + (gi * (BM // TM) + ty) * W + q
            if row < m:
                for gj in cl.unroll(range(TN // W)):
                    col = col0 + (gj * TX + tx) * W
                    if VIO == 4:
                        if col < n:
                            c[(row * n + col) >> 2] = IO(acc[(gi * W + q) * (TN // W) + gj])
                    else:
                        for j in cl.unroll(range(W)):
                            if col + j < n:
                                z = (gi * W + q) * (TN // W) + gj
                                c[row * n + col + j] = T(lane(acc[z], j, W))
