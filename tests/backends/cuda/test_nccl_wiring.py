"""The NCCL collectives' wiring on the fake runtime (pointers, counts, types, ops, roots, one
communicator set per device set), and NCCL missing; the real NCCL runs in test_collectives.py."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import cubeplug.collectives  # noqa: F401 - the portable path of clients sharing a device
from cubeplug.core.errors import CollectiveAbortedError, CollectiveUnavailableError
from cubeplug.testing.suite.collectives import expected, ok, sample, together
from tests.backends.cuda import fake_nccl


@pytest.fixture
def pair(mode: str, make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> list[Any]:
    if mode != "fake":
        pytest.skip("the fake NCCL only (test_collectives.py runs the real one on two GPUs)")
    import cupy

    cupy.cuda.runtime.devices = 2
    fake_nccl.install(monkeypatch)
    return [make_client(0), make_client(1)]


@pytest.mark.parametrize("op", ["sum", "prod", "min", "max"])
def test_all_reduce_through_nccl(pair: list[Any], op: str) -> None:
    assert pair[0].collectives.name == "nccl"
    parts = [sample("f32", 1001, r, op) for r in range(2)]
    srcs = [c.asarray(p) for c, p in zip(pair, parts)]
    outs = [c.empty_array(1001, "f32") for c in pair]
    ok(together(pair, lambda r, c: c.all_reduce(srcs[r], outs[r], op, devices=pair)))
    for o in outs:
        np.testing.assert_array_equal(o.numpy(), expected(parts, op))
    made = len(fake_nccl.NcclCommunicator.worlds)
    ok(together(pair, lambda r, c: c.all_reduce(srcs[r], outs[r], op, devices=pair)))
    assert len(fake_nccl.NcclCommunicator.worlds) == made  # the communicators are made once per set
    ok(together(pair, lambda r, c: c.all_reduce(srcs[r], srcs[r], op, devices=[0, 1])))  # by index, in place
    for s in srcs:
        np.testing.assert_array_equal(s.numpy(), expected(parts, op))


def test_the_last_rank_issues_every_call_in_one_nccl_group(pair: list[Any]) -> None:
    """One thread hand-off per call: the last rank to arrive issues both ranks' NCCL calls between
    groupStart and groupEnd (NCCL's way for one thread driving several devices), each on the
    stream of its own rank's thread; the other rank returns once its call was issued."""
    xs = [c.asarray(np.full(64, r + 1, np.float32)) for r, c in enumerate(pair)]
    for _ in range(3):
        fake_nccl.LOG.clear()
        ok(together(pair, lambda r, c: c.all_reduce(xs[r], xs[r], devices=pair)))
        assert [what for what, _ in fake_nccl.LOG] == ["groupStart", "allReduce", "allReduce", "groupEnd"]
        assert len({thread for _, thread in fake_nccl.LOG}) == 1
    np.testing.assert_array_equal(xs[1].numpy(), np.full(64, 3 * 2**2, np.float32))
    # the issuing thread's current device is its own again (the other rank's call switched it)
    import cupy

    current = [-1, -1]

    def call(r: int, c: Any) -> None:
        cupy.cuda.runtime.setDevice(r)
        c.all_reduce(xs[r], xs[r], devices=pair)
        current[r] = cupy.cuda.runtime.getDevice()

    ok(together(pair, call))
    assert current == [0, 1]
    # ordered with each rank's later work on its stream: a read after the call sees the result
    ok(together(pair, lambda r, c: c.all_reduce(xs[r], xs[r], "max", devices=pair)))
    for x in xs:
        np.testing.assert_array_equal(x.numpy(), np.full(64, 24, np.float32))  # 3 * 2**3


def test_a_rank_failing_before_the_group_issues_no_call(pair: list[Any]) -> None:
    """A rank whose part cannot be prepared (here its pointer lookup fails) stops the whole group
    before groupStart: no rank's NCCL call is issued (one issued alone would wait forever for its
    peer), every rank raises, and the next collective works."""
    xs = [c.asarray(np.full(64, r + 1, np.float32)) for r, c in enumerate(pair)]
    server = pair[1].server

    def broken(handle: Any) -> int:
        raise RuntimeError("no pointer")

    server.device_pointer = broken  # on this instance only
    try:
        fake_nccl.LOG.clear()
        results = together(pair, lambda r, c: c.all_reduce(xs[r], xs[r], devices=pair))
    finally:
        del server.device_pointer
    assert all(isinstance(r, BaseException) for r in results), results
    assert "allReduce" not in [what for what, _ in fake_nccl.LOG]
    ok(together(pair, lambda r, c: c.all_reduce(xs[r], xs[r], devices=pair)))
    for x in xs:
        np.testing.assert_array_equal(x.numpy(), np.full(64, 3, np.float32))


def test_the_other_collectives_through_nccl(pair: list[Any]) -> None:
    data = sample("i32", 17, 1)
    views = [c.create(np.concatenate([np.zeros(3, np.int32), data])).offset_start(12) for c in pair]
    outs = [c.empty(68) for c in pair]
    ok(together(pair, lambda r, c: c.broadcast(views[r] if r == 1 else None, outs[r], 1, devices=pair,
                                               dtype="i32")))  # fmt: skip
    for c, o in zip(pair, outs):
        np.testing.assert_array_equal(c.to_numpy(o, "i32"), data)
    gathered = [c.empty_array(34, "i32") for c in pair]
    ok(together(pair, lambda r, c: c.all_gather(views[r], gathered[r].handle, devices=pair, dtype="i32")))
    for g in gathered:
        np.testing.assert_array_equal(g.numpy(), np.concatenate([data, data]))
    big = [c.asarray(sample("f64", 10, 5 + r)) for r, c in enumerate(pair)]
    halves = [c.empty_array(5, "f64") for c in pair]
    ok(together(pair, lambda r, c: c.reduce_scatter(big[r], halves[r], "min", devices=pair)))
    want = np.minimum(big[0].numpy(), big[1].numpy())
    for r, h in enumerate(halves):
        np.testing.assert_array_equal(h.numpy(), want[5 * r : 5 * r + 5])
    assert fake_nccl.NcclCommunicator.worlds[0].calls == ["broadcast", "allGather", "reduceScatter"]


def test_nccl_missing(mode: str, make_client: Callable[..., Any], monkeypatch: pytest.MonkeyPatch) -> None:
    if mode != "fake":
        pytest.skip("the fake runtime has no NCCL")
    import cupy

    cupy.cuda.runtime.devices = 2
    monkeypatch.setitem(__import__("sys").modules, "cupy.cuda.nccl", None)
    pair = [make_client(0), make_client(1)]
    xs = [c.asarray(np.ones(4, np.float32)) for c in pair]
    errors = together(pair, lambda r, c: c.all_reduce(xs[r], xs[r], devices=pair, timeout=30))
    assert isinstance(errors[0], CollectiveUnavailableError), errors[0]
    assert "pip install nvidia-nccl-cu12" in str(errors[0]) and "collectives = \"portable\"" in str(errors[0])
    assert isinstance(errors[1], CollectiveUnavailableError | CollectiveAbortedError), errors[1]


def test_closing_a_member_releases_its_communicators(pair: list[Any]) -> None:
    made = fake_nccl.NcclCommunicator.all
    srcs = [c.asarray(np.ones(8, np.float32)) for c in pair]
    start = len(made)
    ok(together(pair, lambda r, c: c.all_reduce(srcs[r], srcs[r], devices=pair)))
    by_clients = made[start:]
    ok(together(pair, lambda r, c: c.all_reduce(srcs[r], srcs[r], devices=[0, 1])))  # by index
    by_index = made[start + len(by_clients) :]  # (none when an earlier test made that group)
    pair[0].close()
    assert by_clients and all(c.destroyed for c in by_clients)  # that group can never meet again
    assert not any(c.destroyed for c in by_index)  # kept: new clients of devices 0 and 1 use it
