"""The CPU server: what its worker's queue means for memory."""

from __future__ import annotations

import numpy as np

import cubeplug
from cubeplug import lang as cl
from cubeplug.lang import Array, f32

BIG = 40 << 20


@cl.kernel
def head_fill(x: Array[f32], v: f32) -> None:
    i = cl.ABSOLUTE_POS_X
    if i < 64:
        x[i] = v


def test_memory_held_by_queued_work_is_released_before_out_of_memory() -> None:
    """A loop that drops each output while its launch is queued stays within a limit of five
    outputs: on the out-of-memory path the server submits the queues and waits for the worker,
    whose tasks held the dropped outputs' memory (without it, the sixth reservation raised)."""
    client = cubeplug.client("cpu", memory_limit=5 * BIG)
    try:
        kept = []
        for i in range(12):
            out = client.empty(BIG)
            head_fill.launch(client, cubeplug.CubeCount(1), 64, out, float(i))
            if i in (4, 11):
                kept.append(out)
        for value, out in zip((4.0, 11.0), kept, strict=True):
            np.testing.assert_array_equal(client.to_numpy(out, "f32")[:64], np.full(64, value, np.float32))
        assert client.memory_usage().bytes_reserved <= 5 * BIG
    finally:
        client.close()
