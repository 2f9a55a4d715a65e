"""The seats a client keeps of its collectives' ``devices`` lists, on CPU clients: they hold no peer
(a dropped peer, closed or not, is collected and its seats go), and they are found again, by list
of clients and by list of indices (numpy integers too), without joining anew. Every backend runs the
suite's collective tests (``cubeplug/testing/suite/collectives.py``) as well."""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import cubeplug.collectives  # noqa: F401 - the portable collectives, for clients built here
from cubeplug.core import collective
from cubeplug.core.errors import CollectiveMismatchError
from tests.conftest import make_cpu_client


@pytest.fixture
def joins(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """The ranks that joined a group (a seat made anew) since the test began."""
    made: list[int] = []
    real = collective._join

    def counted(client: Any, devices: Any) -> Any:
        found = real(client, devices)
        made.append(found[1])
        return found

    monkeypatch.setattr(collective, "_join", counted)
    return made


@pytest.fixture
def pair() -> Iterator[list[Any]]:
    clients = [make_cpu_client(), make_cpu_client()]
    yield clients
    for c in clients:
        c.close()


def each(method: str, clients: list[Any], srcs: list[Any], dsts: list[Any]) -> None:
    """Every client's collective ``method`` of its ``srcs`` into its ``dsts`` among ``clients``,
    each from a thread of its own."""
    errors: list[BaseException] = []

    def run(rank: int) -> None:
        try:
            getattr(clients[rank], method)(srcs[rank], dsts[rank], devices=clients)
        except BaseException as exc:
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(r,)) for r in range(len(clients))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    assert not errors, errors


def test_a_peer_dropped_without_close_is_collected(pair: list[Any], joins: list[int]) -> None:
    """(An all_gather and an all_reduce: the portable all_reduce launches a cubeplug.lang kernel,
    whose caches hold the clients weakly.)"""
    a, b = pair.pop(0), make_cpu_client()
    devices = [a, b]
    xs = [c.asarray(np.full(3, r + 1, np.float32)) for r, c in enumerate(devices)]
    ys = [c.asarray(np.zeros(6, np.float32)) for c in devices]
    for _ in range(3):
        each("all_gather", devices, xs, ys)
    assert sorted(joins) == [0, 1]  # one join per rank: the later calls found their seats
    np.testing.assert_array_equal(ys[0].numpy(), np.float32([1, 1, 1, 2, 2, 2]))
    each("all_reduce", devices, ys, ys)
    np.testing.assert_array_equal(ys[0].numpy(), np.float32([2, 2, 2, 4, 4, 4]))
    assert len(a.collective_seats) == 1
    gone = weakref.ref(b)
    del b, devices, xs, ys
    gc.collect()
    assert gone() is None
    assert a.collective_seats == {}  # the seat of the list went with the peer
    a.close()


def test_seats_are_keyed_by_server_not_by_hash(monkeypatch: pytest.MonkeyPatch, joins: list[int]) -> None:
    """Peers whose hashes are equal are still told apart (their servers' ids key the seats), and
    every list keeps its own seat: found again without joining anew, each with its own group."""
    from cubeplug.core.client import ComputeClient

    monkeypatch.setattr(ComputeClient, "__hash__", lambda self: 0)
    a, b, c = make_cpu_client(), make_cpu_client(), make_cpu_client()
    try:
        for peers in ([a, b], [a, c]):
            xs = [d.asarray(np.full(2, r + 1, np.float32)) for r, d in enumerate(peers)]
            ys = [d.asarray(np.zeros(4, np.float32)) for d in peers]
            for _ in range(2):
                each("all_gather", peers, xs, ys)
            np.testing.assert_array_equal(ys[0].numpy(), np.float32([1, 1, 2, 2]))
        assert sorted(joins) == [0, 0, 1, 1]  # one join per rank and list: the later calls hit
        assert len(a.collective_seats) == 2
        seat_b, seat_c = (collective._seat(a, peers) for peers in ([a, b], [a, c]))
        assert seat_b.group is not seat_c.group
    finally:
        for d in (a, b, c):
            d.close()


def test_seats_of_index_lists_are_found_by_value(joins: list[int]) -> None:
    client = make_cpu_client()  # of device 0
    try:
        x = client.asarray(np.ones(2, np.float32))
        for index in (0, np.int64(0), np.int64(0), 0):
            # a fresh numpy integer each call: its id says nothing, its value finds the seat
            client.all_reduce(x, x, devices=[index])
        assert joins == [0, 0]  # the int's seat, then the numpy integer's (the types differ)
        with pytest.raises(CollectiveMismatchError, match="not among the devices"):
            client.all_reduce(x, x, devices=[np.int64(1)])  # same type, another value: no hit
        with pytest.raises(CollectiveMismatchError, match="not among the devices"):
            client.all_reduce(x, x, devices=[2**61 - 1])  # hashes as 0 does: the values are compared
    finally:
        client.close()


def test_an_array_dropped_after_a_collective_frees_its_memory() -> None:
    """The seat remembers the Arrays it checked; a collected Array's entry (and its handle, which
    holds the memory) goes at once, not when 32 other Arrays have been seen."""
    client = make_cpu_client()
    try:
        kept = client.asarray(np.ones(16, np.float32))
        x = client.asarray(np.ones(1 << 16, np.float32))
        for _ in range(2):
            client.all_reduce(x, x, devices=[client])
            client.all_reduce(kept, kept, devices=[client])
        client.sync()
        in_use = client.memory_usage().bytes_in_use
        del x
        gc.collect()
        client.sync()
        assert client.memory_usage().bytes_in_use == in_use - (1 << 18)
        client.all_reduce(kept, kept, devices=[client])  # the other entry still serves
        np.testing.assert_array_equal(kept.numpy(), np.ones(16, np.float32))
    finally:
        client.close()
