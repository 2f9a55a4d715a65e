"""Collectives among several clients of the backend (``all_reduce``, ``broadcast``, ``all_gather``,
``reduce_scatter``), against numpy, and every error of the rendezvous.

The participants are clients of distinct devices where the backend has several (a test module sets
``CUBEPLUG_PEERS_CONFIG``, e.g. ``{"backends": {"cpu": {"devices": 3}}}`` for the cpu backend), else
several clients of one device. Each participant calls from a thread of its own, as users do.
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np
import pytest

import cubeplug.collectives  # noqa: F401 - installs the portable collectives for clients built here
from cubeplug.core import collective
from cubeplug.core.errors import (
    BackendUnavailableError,
    CaptureError,
    CollectiveAbortedError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    ValidationError,
)
from cubeplug.core.kernel import DTYPES
from cubeplug.testing.suite.lang import lang_missing

#: Participants of most tests: three, so that the rank order of a reduction shows.
PEERS = 3
OPS = ("sum", "prod", "min", "max")
_REDUCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


@pytest.fixture(scope="module")
def cubeplug_peers(cubeplug_backend: Any, request: pytest.FixtureRequest) -> Iterator[list[Any]]:
    """Fresh clients of the backend: of devices 0, 1, 2 (at least two) where it has them, else
    ``PEERS`` clients of one device; made once for the module's collective tests (each test leaves
    them working: the error tests check it). Opening and closing devices for every test lost the
    NVIDIA Vulkan adapter on the H200 after six rounds beside its OpenGL one ("Parent device is
    lost" at the next request_device), which no test is about."""
    reason = lang_missing(cubeplug_backend.client())
    if reason is not None:  # the portable collectives reduce with a cubeplug.lang kernel
        pytest.skip(reason)
    sections = getattr(request.module, "CUBEPLUG_PEERS_CONFIG", {})
    made: list[Any] = []
    try:
        for device in range(PEERS):
            try:
                made.append(cubeplug_backend.fresh(device, **sections))
            except BackendUnavailableError:
                break
        if len(made) < 2:
            for client in made:
                client.close()
            made = [cubeplug_backend.fresh(**sections) for _ in range(PEERS)]
        yield made
    finally:
        for client in made:
            client.close()


def together(clients: Sequence[Any], call: Callable[[int, Any], Any]) -> list[BaseException | None]:
    """Run ``call(rank, client)`` for every client, each on a thread of its own; each rank's error."""
    errors: list[BaseException | None] = [None] * len(clients)

    def run(rank: int) -> None:
        try:
            call(rank, clients[rank])
        except BaseException as exc:
            errors[rank] = exc

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    return errors


def each(peers: Sequence[Any], method: str, srcs: Sequence[Any], dsts: Sequence[Any], *args: Any,
         **kwargs: Any) -> list[BaseException | None]:  # fmt: skip
    """``client.<method>(srcs[r], dsts[r], *args, devices=peers, **kwargs)`` on every rank at once."""
    return together(peers, lambda r, c: getattr(c, method)(srcs[r], dsts[r], *args, devices=peers, **kwargs))


def ok(errors: list[BaseException | None]) -> None:
    for rank, error in enumerate(errors):
        if error is not None:
            raise AssertionError(f"rank {rank} raised {type(error).__name__}: {error}") from error


def seats_now(client: Any) -> int:
    """``client``'s count of collective seats once the peers other tests dropped are collected
    (their seats leave then, not in a later count)."""
    gc.collect()
    return len(client.collective_seats)


def assert_released(client: Any, gone: weakref.ref[Any], seats: int) -> None:
    """The peer ``gone`` (closed, every reference to it dropped) is collected and ``client``'s
    seat of their list went with it: one seat fewer than ``seats`` (:func:`seats_now`)."""
    gc.collect()
    assert gone() is None, "the dropped peer is still referenced (by the seats of its peers?)"
    assert len(client.collective_seats) == seats - 1


def sample(dtype: str, n: int, seed: int, op: str = "sum") -> np.ndarray:
    """Values whose reduction stays exact-ish and in range for ``dtype`` under ``op``."""
    rng = np.random.default_rng(seed)
    dt = DTYPES[dtype]
    values: np.ndarray
    if dt.kind == "f":
        values = rng.uniform(0.5, 1.5, n) if op == "prod" else rng.standard_normal(n) * 4
    elif dt.kind == "u":
        values = rng.integers(1, 4 if op == "prod" else 50, n)
    else:
        values = rng.integers(-3 if op == "prod" else -50, 4 if op == "prod" else 50, n)
    return np.asarray(values).astype(dt)


def expected(parts: Sequence[np.ndarray], op: str) -> np.ndarray:
    """The reduction in rank order, as the portable path computes it (every rank the same bits)."""
    acc: np.ndarray = parts[0].copy()
    for part in parts[1:]:
        acc = np.asarray(_REDUCE[op](acc, part))
    return acc


def check(got: np.ndarray, want: np.ndarray) -> None:
    if got.dtype.kind == "f":
        tol = 1e-2 if got.dtype.itemsize == 2 else 1e-5
        np.testing.assert_allclose(got, want, rtol=tol, atol=tol)
    else:
        np.testing.assert_array_equal(got, want)


def placed(client: Any, data: np.ndarray, lead: int) -> tuple[Any, Any]:
    """``data`` in a view ``lead`` elements into a larger allocation (and the allocation)."""
    item = data.dtype.itemsize
    whole = client.create(np.concatenate([np.zeros(lead, data.dtype), data, np.zeros(3, data.dtype)]))
    return whole.offset_start(lead * item).offset_end(3 * item), whole


def dtypes_of(peers: list[Any]) -> list[str]:
    """The dtypes every peer's collectives take (two devices of one backend may differ: lavapipe's
    Vulkan adapter has f16 and f64, its OpenGL one neither)."""
    common = set(peers[0].collectives.dtypes(peers[0]))
    for c in peers[1:]:
        common &= c.collectives.dtypes(c)
    return sorted(common)


class TestCollectives:
    """Every op and dtype the backend's collectives declare, odd sizes, views with offsets."""

    @pytest.mark.parametrize("op", OPS)
    def test_all_reduce_every_dtype(self, cubeplug_peers: list[Any], op: str) -> None:
        peers = cubeplug_peers
        for dtype in dtypes_of(peers):
            for n in (1, 7, 1001):
                parts = [sample(dtype, n, 10 * r + n, op) for r in range(len(peers))]
                views = [placed(c, parts[r], lead=r + 1) for r, c in enumerate(peers)]
                outs = [placed(c, np.zeros(n, parts[0].dtype), lead=2 * r + 3) for r, c in enumerate(peers)]
                ok(each(peers, "all_reduce", [v[0] for v in views], [o[0] for o in outs], op, dtype=dtype))
                want = expected(parts, op)
                got = [c.to_numpy(outs[r][0], dtype) for r, c in enumerate(peers)]
                for g in got:
                    check(g, want)
                for g in got[1:]:  # every rank holds the same bits
                    assert g.tobytes() == got[0].tobytes(), (dtype, n)

    def test_all_reduce_in_place_on_arrays(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        parts = [sample("f32", 333, r) for r in range(len(peers))]
        arrays = [c.asarray(p) for c, p in zip(peers, parts)]
        ok(together(peers, lambda r, c: c.all_reduce(arrays[r], arrays[r], devices=peers)))
        for c, a in zip(peers, arrays):
            c.sync_collective()
            check(a.numpy(), expected(parts, "sum"))

    def test_by_device_index(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        indices = [c.device.index for c in peers]
        if len(set(indices)) < len(peers):
            pytest.skip("backend lacks several devices (the peers are clients of one device)")
        parts = [sample("f32", 9, r) for r in range(len(peers))]
        arrays = [c.asarray(p) for c, p in zip(peers, parts)]
        ok(together(peers, lambda r, c: c.all_reduce(arrays[r], arrays[r], "max", devices=indices)))
        for a in arrays:
            check(a.numpy(), expected(parts, "max"))

    def test_the_work_is_ordered_on_the_callers_stream(self, cubeplug_peers: list[Any]) -> None:
        """A write queued before the collective is what it reduces; work queued after sees the result."""
        peers = cubeplug_peers
        n = 4097
        arrays = [c.asarray(np.zeros(n, np.float32)) for c in peers]

        def step(r: int, c: Any) -> None:
            c.write(arrays[r].handle, np.full(n, r + 1, np.float32))
            c.all_reduce(arrays[r], arrays[r], devices=peers)
            c.all_reduce(arrays[r], arrays[r], devices=peers)

        ok(together(peers, step))
        total = sum(range(1, len(peers) + 1)) * len(peers)
        for a in arrays:
            np.testing.assert_array_equal(a.numpy(), np.full(n, total, np.float32))

    def test_broadcast(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        for dtype in dtypes_of(peers):
            data = sample(dtype, 17, 3)
            root = len(peers) - 1
            src = placed(peers[root], data, lead=5)[0]
            outs = [placed(c, np.zeros_like(data), lead=r + 1)[0] for r, c in enumerate(peers)]
            srcs = [src if r == root else None for r in range(len(peers))]
            ok(each(peers, "broadcast", srcs, outs, root, dtype=dtype))
            for c, o in zip(peers, outs):
                check(c.to_numpy(o, dtype), data)

    def test_a_repeated_broadcast_finds_its_checked_handles(
        self, cubeplug_peers: list[Any], monkeypatch: pytest.MonkeyPatch
    ) -> None:
        """The ranks that pass ``src=None`` find their checked handles in their seats at the next
        call, as the root does (none checks them again); the root's None is still refused."""
        peers = cubeplug_peers
        built: list[int] = []  # the ranks whose handles were checked anew
        real = collective._handles

        def counted(client: Any, call: Any, src: Any, dst: Any, rank: int) -> Any:
            built.append(rank)
            return real(client, call, src, dst, rank)

        monkeypatch.setattr(collective, "_handles", counted)
        root = len(peers) - 1
        data = sample("i32", 11, 7)
        srcs = [peers[root].asarray(data) if r == root else None for r in range(len(peers))]
        outs = [c.asarray(np.zeros_like(data)) for c in peers]
        for i in range(3):
            built.clear()
            ok(each(peers, "broadcast", srcs, outs, root))
            for o in outs:
                np.testing.assert_array_equal(o.numpy(), data)
            assert sorted(built) == (list(range(len(peers))) if i == 0 else []), (i, built)
        errors = each(peers, "broadcast", [None] * len(peers), outs, root, timeout=30)
        assert isinstance(errors[root], ValidationError), errors[root]
        assert all(isinstance(e, CollectiveAbortedError) for r, e in enumerate(errors) if r != root), errors

    def test_all_gather(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        for dtype in dtypes_of(peers):
            n = 5
            parts = [sample(dtype, n, r) for r in range(len(peers))]
            srcs = [placed(c, parts[r], lead=r + 2)[0] for r, c in enumerate(peers)]
            outs = [placed(c, np.zeros(n * len(peers), parts[0].dtype), lead=1)[0] for c in peers]
            ok(each(peers, "all_gather", srcs, outs, dtype=dtype))
            for c, o in zip(peers, outs):
                check(c.to_numpy(o, dtype), np.concatenate(parts))

    @pytest.mark.parametrize("op", OPS)
    def test_reduce_scatter(self, cubeplug_peers: list[Any], op: str) -> None:
        peers = cubeplug_peers
        for dtype in dtypes_of(peers):
            n = 7
            parts = [sample(dtype, n * len(peers), 5 * r + 1, op) for r in range(len(peers))]
            srcs = [placed(c, parts[r], lead=1)[0] for r, c in enumerate(peers)]
            outs = [placed(c, np.zeros(n, parts[0].dtype), lead=r + 3)[0] for r, c in enumerate(peers)]
            ok(each(peers, "reduce_scatter", srcs, outs, op, dtype=dtype))
            want = expected(parts, op)
            for r, (c, o) in enumerate(zip(peers, outs)):
                check(c.to_numpy(o, dtype), want[r * n : (r + 1) * n])

    def test_a_dropped_peer_is_released(self, cubeplug_backend: Any, cubeplug_peers: list[Any]) -> None:
        """A client's cached seat of a devices list holds the peers weakly: a peer dropped after
        collectives (closed first, which every backend's device wants) is collected, and the seat
        of the list goes with it. (The portable all_reduce launches a cubeplug.lang kernel, whose
        caches hold the clients weakly.)"""
        a, b = cubeplug_peers[0], cubeplug_backend.fresh()
        pair = [a, b]
        xs = [c.asarray(np.full(4, r + 1, np.int32)) for r, c in enumerate(pair)]
        ys = [c.asarray(np.zeros(8, np.int32)) for c in pair]
        for _ in range(2):  # the second call finds the seat
            ok(each(pair, "all_gather", xs, ys))
        np.testing.assert_array_equal(ys[0].numpy(), np.repeat(np.array([1, 2], np.int32), 4))
        ok(each(pair, "all_reduce", ys, ys))
        np.testing.assert_array_equal(ys[0].numpy(), np.repeat(np.array([2, 4], np.int32), 4))
        seats = seats_now(a)
        gone = weakref.ref(b)
        b.close()
        del b, pair, xs, ys
        assert_released(a, gone, seats)
        TestCollectiveErrors.still_work(cubeplug_peers)  # the others keep working


class TestCollectiveErrors:
    """Each misuse raises its own error in every participant, and the clients keep working."""

    def test_inside_a_capture_block(self, cubeplug_peers: list[Any]) -> None:
        a, b = cubeplug_peers[:2]
        x = a.asarray(np.ones(8, np.float32))
        y = b.create(np.zeros(32, np.uint8))
        with a.capture() as graph:
            with pytest.raises(CaptureError, match="all_reduce"):  # would run now, not at replays
                a.all_reduce(x, x, devices=cubeplug_peers)
            with pytest.raises(CaptureError, match="copy to another client"):
                a.copy_to(x.handle, b, y)
        assert len(graph) == 0
        self.still_work(cubeplug_peers)

    @staticmethod
    def still_work(peers: list[Any]) -> None:
        arrays = [c.asarray(np.full(6, r + 1, np.int32)) for r, c in enumerate(peers)]
        ok(together(peers, lambda r, c: c.all_reduce(arrays[r], arrays[r], devices=peers)))
        total = sum(range(1, len(peers) + 1))
        for a in arrays:
            np.testing.assert_array_equal(a.numpy(), np.full(6, total, np.int32))

    def test_mismatched_dtype(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        arrays = [c.asarray(np.ones(8, np.float32)) for c in peers]

        def call(r: int, c: Any) -> None:
            dtype = "i32" if r == 1 else "f32"
            c.all_reduce(arrays[r].handle, arrays[r].handle, devices=peers, dtype=dtype, timeout=30)

        errors = together(peers, call)
        for e in errors:
            assert isinstance(e, CollectiveMismatchError), e
            assert "disagree" in str(e) and "dtype=i32" in str(e) and "rank 1" in str(e)
        self.still_work(peers)

    def test_mismatched_size(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        last = len(peers) - 1
        arrays = [c.asarray(np.ones(8 + (r == last), np.float32)) for r, c in enumerate(peers)]
        errors = together(peers, lambda r, c: c.all_reduce(arrays[r], arrays[r], devices=peers, timeout=30))
        for e in errors:
            assert isinstance(e, CollectiveMismatchError), e
            assert f"rank {last}: src 9, dst 9" in str(e)
        self.still_work(peers)

    def test_device_listed_twice(self, cubeplug_peers: list[Any]) -> None:
        a, b = cubeplug_peers[:2]
        x = a.asarray(np.ones(4, np.float32))
        with pytest.raises(CollectiveMismatchError, match=r"lists .* twice"):
            a.all_reduce(x, x, devices=[a, b, a])
        with pytest.raises(CollectiveMismatchError, match=r"lists .* twice"):
            a.all_reduce(x, x, devices=[0, 0])
        with pytest.raises(CollectiveMismatchError, match="not among the devices"):
            a.all_reduce(x, x, devices=[b])
        self.still_work(cubeplug_peers)

    def test_bad_op_and_dtype(self, cubeplug_peers: list[Any]) -> None:
        a = cubeplug_peers[0]
        x = a.asarray(np.ones(4, np.float32))
        with pytest.raises(CollectiveMismatchError, match="op must be one of sum, prod, min, max"):
            a.all_reduce(x, x, "mean", devices=[a])
        with pytest.raises(CollectiveMismatchError, match="needs the element type"):
            a.all_reduce(x.handle, x.handle, devices=[a])
        with pytest.raises(CollectiveMismatchError, match="dtype=i32 but the arrays are f32"):
            a.all_reduce(x, x, devices=[a], dtype="i32")
        with pytest.raises(ValidationError, match="not a whole number of 4-byte elements"):
            a.all_reduce(x.handle.offset_end(2), x.handle.offset_end(2), devices=[a], dtype="f32")
        # refused after an equal valid call too (True == 1.0 == 1 as cache keys)
        a.broadcast(x, x, 0, devices=[a])
        for root in (False, 0.0):
            with pytest.raises(CollectiveMismatchError, match="root must be a rank"):
                a.broadcast(x, x, root, devices=[a])
        self.still_work(cubeplug_peers)

    def test_a_participant_that_never_arrives(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        arrays = [c.asarray(np.ones(4, np.float32)) for c in peers]
        present = peers[:-1]
        errors = together(present, lambda r, c: c.all_reduce(arrays[r], arrays[r], devices=peers,
                                                              timeout=0.5))  # fmt: skip
        missing = f"rank {len(peers) - 1} ({peers[-1].device})"
        for e in errors:
            assert isinstance(e, CollectiveTimeoutError), e
            assert missing in str(e) and "never arrived within 0.5 s" in str(e)
        self.still_work(peers)

    def test_a_participant_that_fails_its_own_checks(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        arrays = [c.asarray(np.ones(4, np.float32)) for c in peers]
        foreign = peers[0].asarray(np.ones(4, np.float32))  # rank 1 passes rank 0's memory

        def call(r: int, c: Any) -> None:
            c.all_reduce(foreign if r == 1 else arrays[r], arrays[r], devices=peers, timeout=30)

        errors = together(peers, call)
        assert isinstance(errors[1], ValidationError) and "another client" in str(errors[1])
        for r in range(len(peers)):
            if r == 1:
                continue
            assert isinstance(errors[r], CollectiveAbortedError), errors[r]
            assert "rank 1" in str(errors[r])
        self.still_work(peers)

    def test_a_bad_argument_when_the_others_never_come(self, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        x = peers[0].asarray(np.ones(4, np.float32))
        with pytest.raises(CollectiveMismatchError, match="op must be one of"):
            peers[0].all_reduce(x, x, "avg", devices=peers, timeout=0.3)
        self.still_work(peers)

    def test_a_closed_client(self, cubeplug_backend: Any, cubeplug_peers: list[Any]) -> None:
        peers = cubeplug_peers
        gone = cubeplug_backend.fresh()
        x = gone.asarray(np.ones(4, np.float32))
        gone.close()
        with pytest.raises(CollectiveAbortedError, match="closed client"):
            gone.all_reduce(x, x, devices=[gone, peers[0]])
        y = peers[0].asarray(np.ones(4, np.float32))
        with pytest.raises(CollectiveAbortedError, match="lists a closed client"):
            peers[0].all_reduce(y, y, devices=[peers[0], gone])
        self.still_work(peers)

    def test_a_client_that_closes_after_collectives(
        self, cubeplug_backend: Any, cubeplug_peers: list[Any]
    ) -> None:
        """What the first collective of a devices list checked (and each client then caches) is
        checked again once a member closed, and a dropped array is caught at the next call."""
        a, b = cubeplug_peers[0], cubeplug_backend.fresh()
        pair = [a, b]
        xs = [c.asarray(np.full(4, r + 1, np.float32)) for r, c in enumerate(pair)]
        for _ in range(2):
            ok(together(pair, lambda r, c: c.all_reduce(xs[r], xs[r], devices=pair)))
        check(xs[0].numpy(), np.full(4, 6, np.float32))
        dropped = a.asarray(np.ones(4, np.float32))
        ok(together(pair, lambda r, c: c.all_reduce(dropped if r == 0 else xs[1], xs[r], devices=pair)))
        dropped.handle.drop()
        errors = together(pair, lambda r, c: c.all_reduce(dropped if r == 0 else xs[1], xs[r], devices=pair,
                                                          timeout=30))  # fmt: skip
        assert isinstance(errors[0], ValidationError) and "dropped" in str(errors[0]), errors[0]
        assert isinstance(errors[1], CollectiveAbortedError), errors[1]
        b.close()
        with pytest.raises(CollectiveAbortedError, match="lists a closed client"):
            a.all_reduce(xs[0], xs[0], devices=pair)
        self.still_work(cubeplug_peers)
