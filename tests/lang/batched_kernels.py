"""Kernels for test_batching (in a file, so their source can be captured)."""

from __future__ import annotations

from cubeplug import lang as cl
from cubeplug.lang import Array, Atomic, Vec, f32, i32, u32


@cl.kernel
def loops(x: Array[f32], y: Array[f32], z: Array[f32], out: Array[i32], back: Array[i32],
          hist: Array[Atomic[u32]], w: u32) -> None:
    """Loops with break/continue, early return, strided, reversed and shifted indices (partly out
    of bounds), an atomic whose old value is used; race-free."""
    i = cl.ABSOLUTE_POS
    if i >= len(out):
        return
    acc = f32(0)
    count = i32(0)
    for j in range(0, w):
        v = x[i * w + j]
        if v < 0.0:
            continue
        if v > 5.0:
            break
        acc += v
        count += 1
    k = u32(0)
    while k < i % 7:
        k += 1
        if k == 3:
            continue
        acc += f32(k)
    y[i] = acc
    z[i + 5] = acc + 1.0
    out[len(out) - 1 - i] = count
    b = i32(i) - 3
    if b >= 0:
        back[b] = b
    old = cl.atomic_add(hist, i % 4, u32(1))
    y[2 * i + len(out)] = f32(old)


@cl.kernel
def sparse(x: Array[f32], y: Array[f32], v4: Array[cl.Vec[f32, 4]], hist: Array[Atomic[u32]],
           z: Array[f32]) -> None:
    """Branches taken by few units of each cube (the interpreter runs them on those lanes alone):
    shared memory read after a barrier, a private array, a vector local, an inner loop with break
    and continue, a nested branch, an atomic whose old value is used, and a local assigned in the
    branch but read after it, and one read only in a branch inside a loop (a later pass reads it)."""
    buf = cl.shared(f32, 32)
    priv = cl.local(f32, 3)
    u = cl.UNIT_POS_X
    i = cl.ABSOLUTE_POS_X
    buf[u] = x[i]
    priv[u % 3] = x[i] * 2.0
    vec = cl.Vec[f32, 4](x[i], 1.0, 2.0, 3.0)
    cl.sync_cube()
    acc = f32(0)
    if u % 8 == 3:
        for k in range(32):
            if buf[k] > 1.5:
                break
            if buf[k] < 0.0:
                continue
            acc += buf[(u + k) % 32]
        if u < 16:
            acc = acc * 2.0 + priv[u % 3]
            vec = cl.Vec[f32, 4](acc, acc, x[i], f32(u))
            old = cl.atomic_add(hist, u % 4, u32(1))
            acc += f32(old)
    elif u == 0:
        acc = buf[31] - 1.0
    y[i] = acc
    v4[i] = vec
    tot = f32(0)
    for k in range(3):
        if u % 8 == k or u == 31:
            tot = tot + buf[k] + 1.0
            z[i] = tot


@cl.kernel
def keep_loaded(x: Array[f32], y: Array[f32]) -> None:
    """A local loaded from ``x``, then a store to ``y`` (which the test binds to the same memory),
    then the local read: it holds the value loaded, as a register does."""
    i = cl.ABSOLUTE_POS_X
    v = x[i]
    y[i] = v + 1.0
    y[i] = y[i] + v


@cl.kernel
def splat(v4: Array[cl.Vec[u32, 4]], a: u32, b: u32, c: u32, d: u32) -> None:
    """One vector stored by every unit (a broadcast row: the interpreter fills it)."""
    v4[cl.ABSOLUTE_POS_X] = cl.Vec[u32, 4](a, b, c, d)


@cl.kernel
def tiles(x: Array[f32], y: Array[f32]) -> None:
    """Shared memory through ``UNIT_POS_X``-affine indices: whole rows, strided, reversed (a
    negative step), partly out of bounds, under a mask, and read back after a barrier."""
    buf = cl.shared(f32, 80)
    u = cl.UNIT_POS_X
    i = cl.ABSOLUTE_POS_X
    buf[u] = x[i]
    buf[2 * u + 16] = x[i] * 2.0
    if u % 3 == 0:
        buf[u + 48] = x[i] + 7.0
    buf[u + 60] = 1.5  # units 20.. are out of bounds: dropped
    cl.sync_cube()
    y[i] = buf[u] + buf[31 - u] + buf[u * 2 + 1] + buf[u + 48] + buf[u + 70]


@cl.kernel
def lane_from_a_branch(x: Array[f32], out: Array[Vec[f32, 4]], k: u32):
    """``j`` read only as the lane of a lane store: computed before a branch of few lanes (which
    must gather it), or assigned in one (which must write it back)."""
    i = cl.ABSOLUTE_POS_X
    j = (i + k) % 4
    if i % 8 == 0:
        out[i][j] = x[i]
    m = u32(0)
    if i % 8 == 1:
        m = u32(2)
    if i % 8 != 0:
        out[i][m] = x[i]


@cl.kernel
def loop_from_memory(idx: Array[u32], y: Array[f32]):
    """A loop starting at a loaded value, whose body stores where it was loaded from."""
    i = cl.ABSOLUTE_POS_X
    for j in range(idx[i], idx[i] + 1):
        idx[i] = u32(100)
        y[i] = f32(j)
