"""Kernels for test_batching (in a file, so their source can be captured)."""

from __future__ import annotations

from cubeplug import lang as cl
from cubeplug.lang import Array, Atomic, f32, i32, u32


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
