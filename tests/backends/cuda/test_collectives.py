"""The cuda backend's collectives (NCCL through ``cupy.cuda.nccl``) and peer copies, on two GPUs.

Everything here needs the GPU machine with two devices (``pytest -m gpu tests/backends/cuda``); the
portable path and the rendezvous are covered on every backend by the conformance suite
(``cubeplug/testing/suite/collectives.py``), which the cuda conformance module runs too.
"""

from __future__ import annotations

import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import CollectiveUnavailableError
from cubeplug.testing.backend import BackendUnderTest
from cubeplug.testing.suite.collectives import (
    OPS,
    assert_released,
    each,
    expected,
    ok,
    sample,
    seats_now,
    together,
)
from tests.backends.cuda.conftest import gpu_skip_reason

pytestmark = pytest.mark.gpu


@pytest.fixture
def pair() -> Iterator[list[Any]]:
    """Fresh clients of cuda:0 and cuda:1 (skipped without two devices)."""
    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    from cubeplug.testing.backend import BackendUnderTest

    backend = BackendUnderTest("cuda")
    try:
        clients = [backend.fresh(0), backend.fresh(1)]
    except Exception as exc:  # one device only
        pytest.skip(f"needs two CUDA devices: {exc}")
    yield clients
    for c in clients:
        c.close()


def test_nccl_is_the_implementation(pair: list[Any]) -> None:
    try:
        impl = pair[0].collectives
    except CollectiveUnavailableError as exc:
        pytest.fail(f"NCCL is missing on the GPU machine: {exc}")
    assert impl.name == "nccl"


@pytest.mark.parametrize("op", OPS)
@pytest.mark.parametrize("dtype", ["f32", "f64", "i32", "i64", "f16"])
def test_all_reduce(pair: list[Any], op: str, dtype: str) -> None:
    n = 1 << 20 | 3
    parts = [sample(dtype, n, r, op) for r in range(2)]
    arrays = [c.asarray(p) for c, p in zip(pair, parts)]
    outs = [c.empty_array(n, dtype) for c in pair]
    ok(together(pair, lambda r, c: c.all_reduce(arrays[r], outs[r], op, devices=pair)))
    want = expected(parts, op)
    for o in outs:
        if o.dtype.kind == "f":
            np.testing.assert_allclose(o.numpy(), want, rtol=1e-2 if dtype == "f16" else 1e-6)
        else:
            np.testing.assert_array_equal(o.numpy(), want)


def test_in_place_by_index_ordered_with_launch_work(pair: list[Any]) -> None:
    n = 4099
    arrays = [c.asarray(np.zeros(n, np.float32)) for c in pair]

    def step(r: int, c: Any) -> None:
        c.fill(arrays[r].handle, float(r + 1), "f32")  # queued before: reduced
        c.all_reduce(arrays[r], arrays[r], devices=[0, 1])
        c.all_reduce(arrays[r], arrays[r], devices=[0, 1])
        c.sync_collective()

    ok(together(pair, step))
    for a in arrays:
        np.testing.assert_array_equal(a.numpy(), np.full(n, 6, np.float32))


def test_broadcast_all_gather_reduce_scatter(pair: list[Any]) -> None:
    n = 1001
    data = sample("f32", n, 7)
    src = pair[1].asarray(data)
    outs = [c.empty_array(n, "f32") for c in pair]
    ok(together(pair, lambda r, c: c.broadcast(src if r == 1 else None, outs[r], 1, devices=pair)))
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), data)
    parts = [sample("f32", n, r) for r in range(2)]
    srcs = [c.asarray(p) for c, p in zip(pair, parts)]
    gathered = [c.empty_array(2 * n, "f32") for c in pair]
    ok(together(pair, lambda r, c: c.all_gather(srcs[r], gathered[r], devices=pair)))
    for g in gathered:
        np.testing.assert_array_equal(g.numpy(), np.concatenate(parts))
    big = [c.asarray(sample("f32", 2 * n, 3 + r)) for r, c in enumerate(pair)]
    halves = [c.empty_array(n, "f32") for c in pair]
    ok(together(pair, lambda r, c: c.reduce_scatter(big[r], halves[r], "max", devices=pair)))
    want = np.maximum(big[0].numpy(), big[1].numpy())
    for r, h in enumerate(halves):
        np.testing.assert_array_equal(h.numpy(), want[r * n : (r + 1) * n])


@pytest.mark.parametrize("direction", [(0, 1), (1, 0)])
def test_peer_to_client_both_ways(pair: list[Any], direction: tuple[int, int]) -> None:
    a, b = pair[direction[0]], pair[direction[1]]
    data = np.random.default_rng(1).standard_normal(1 << 22).astype(np.float32)
    src = a.create(np.zeros_like(data))
    a.write(src, data)  # queued on a's stream: the peer copy comes after it
    moved = a.to_client(src.offset_start(12), b)
    assert moved.owner is b.server
    np.testing.assert_array_equal(b.to_numpy(moved, "f32"), data[3:])


def test_a_peer_of_nccl_collectives_is_collected_once_dropped(pair: list[Any]) -> None:
    """The NCCL path keeps no peer either: cuda:1's client, closed after NCCL collectives (an
    all_reduce, and a broadcast whose other rank passes None), is collected, and cuda:0's seat of
    the list goes with it."""
    a = pair[0]
    b = BackendUnderTest("cuda").fresh(1)
    both = [a, b]
    arrays = [c.asarray(np.full(5, r + 1, np.float32)) for r, c in enumerate(both)]
    outs = [c.empty_array(5, "f32") for c in both]
    for _ in range(2):
        ok(each(both, "all_reduce", arrays, arrays))
        ok(each(both, "broadcast", [arrays[0], None], outs, 0))
    np.testing.assert_array_equal(outs[1].numpy(), np.full(5, 6, np.float32))  # 1+2, then 3+3
    seats = seats_now(a)
    gone = weakref.ref(b)
    b.close()
    del b, both, arrays, outs
    assert_released(a, gone, seats)
