"""Streams: threads on their own streams, long chains of launches, reads and launches across streams."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np

from cubeplug.core.stream import stream_scope
from cubeplug.testing import gates, kernels
from cubeplug.testing.threads import TIMEOUT, Worker

CHAIN = 300
N = 4096


def _chain(client: Any, h: Any, launches: int = CHAIN) -> None:
    k = gates.kernel(client, kernels.ADD_ONE)
    count = kernels.cubes(N)
    for _ in range(launches):
        client.launch(k, count, [h], [N])


class TestStreams:
    """Work is ordered per stream, and a stream waits for the streams whose memory it uses."""

    def test_two_threads_on_their_own_streams(self, cubeplug_client: Any) -> None:
        gates.kernel(cubeplug_client, kernels.ADD_ONE)

        def work(start: int) -> tuple[int, Any, np.ndarray]:
            with cubeplug_client.stream() as sid:
                h = cubeplug_client.create(np.full(N, start, np.int32))
                _chain(cubeplug_client, h)
                return sid, h, cubeplug_client.to_numpy(h, "i32")

        with ThreadPoolExecutor(2) as pool:
            results = list(pool.map(work, (0, 1000)))
        (sid_a, ha, a), (sid_b, hb, b) = results
        assert sid_a != sid_b
        np.testing.assert_array_equal(a, np.full(N, CHAIN, np.int32))
        np.testing.assert_array_equal(b, np.full(N, 1000 + CHAIN, np.int32))
        ra, rb = cubeplug_client.read([ha, hb])  # from a third stream
        assert np.frombuffer(ra, np.int32)[-1] == CHAIN and np.frombuffer(rb, np.int32)[0] == 1000 + CHAIN

    def test_default_stream_per_thread(self, cubeplug_client: Any) -> None:
        gates.kernel(cubeplug_client, kernels.ADD_ONE)

        def work(start: int) -> np.ndarray:
            h = cubeplug_client.create(np.full(N, start, np.int32))
            _chain(cubeplug_client, h, 50)
            result: np.ndarray = cubeplug_client.to_numpy(h, "i32")
            return result

        with ThreadPoolExecutor(2) as pool:
            a, b = pool.map(work, (0, 7))
        assert (a == 50).all() and (b == 57).all()

    def test_cross_stream_read_waits_for_the_writer(self, cubeplug_client: Any) -> None:
        gates.kernel(cubeplug_client, kernels.ADD_ONE)
        queued = threading.Event()
        done = threading.Event()
        box: dict[str, Any] = {}

        def writer() -> None:
            with cubeplug_client.stream():
                h = cubeplug_client.create(np.zeros(N, np.int32))
                _chain(cubeplug_client, h)
                cubeplug_client.flush()  # submitted, not waited for
                box["h"] = h
                queued.set()
                done.wait(TIMEOUT)

        worker = Worker(writer)
        try:
            worker.wait_for(queued, "the writer thread queues its work")
            with cubeplug_client.stream():
                got = cubeplug_client.to_numpy(box["h"], "i32")
        finally:
            done.set()
        worker.join()
        np.testing.assert_array_equal(got, np.full(N, CHAIN, np.int32))

    def test_cross_stream_launch_waits_for_the_writer(self, cubeplug_client: Any) -> None:
        add_from = gates.kernel(cubeplug_client, kernels.ADD_FROM)
        queued = threading.Event()
        box: dict[str, Any] = {}

        def writer() -> None:
            with cubeplug_client.stream():
                h = cubeplug_client.create(np.zeros(N, np.int32))
                _chain(cubeplug_client, h)
                cubeplug_client.flush()
                box["h"] = h
                queued.set()

        worker = Worker(writer)
        worker.wait_for(queued, "the writer thread queues its work")
        with cubeplug_client.stream():
            dst = cubeplug_client.create(np.arange(N, dtype=np.int32))
            cubeplug_client.launch(add_from, kernels.cubes(N), [box["h"], dst], [N])
            got = cubeplug_client.to_numpy(dst, "i32")
        worker.join()
        np.testing.assert_array_equal(got, np.arange(N, dtype=np.int32) + CHAIN)

    def test_writes_after_cross_stream_reads(self, cubeplug_client: Any) -> None:
        add_from = gates.kernel(cubeplug_client, kernels.ADD_FROM)
        with cubeplug_client.stream():
            src = cubeplug_client.create(np.ones(N, np.int32))
            dst = cubeplug_client.create(np.zeros(N, np.int32))
            for _ in range(20):
                cubeplug_client.launch(add_from, kernels.cubes(N), [src, dst], [N])
        with cubeplug_client.stream():  # another stream overwrites src after those reads
            _chain(cubeplug_client, src, 5)
            got_src = cubeplug_client.to_numpy(src, "i32")
        got_dst = cubeplug_client.to_numpy(dst, "i32")
        assert (got_dst == 20).all() and (got_src == 6).all()

    def test_dropped_handle_keeps_memory_for_queued_work(self, cubeplug_client: Any) -> None:
        add_from = gates.kernel(cubeplug_client, kernels.ADD_FROM)
        add_one = gates.kernel(cubeplug_client, kernels.ADD_ONE)
        src = cubeplug_client.create(np.full(N, 3, np.int32))
        dst = cubeplug_client.create(np.zeros(N, np.int32))
        for _ in range(20):  # work queued after src's upload keeps the device busy
            cubeplug_client.launch(add_one, kernels.cubes(N), [dst], [N])
        cubeplug_client.launch(add_from, kernels.cubes(N), [src, dst], [N])
        src.drop()  # the queued launch still reads src's memory: it must not be lent again before
        again = [cubeplug_client.create(np.full(N, 100, np.int32)) for _ in range(4)]
        np.testing.assert_array_equal(cubeplug_client.to_numpy(dst, "i32"), np.full(N, 23, np.int32))
        for h in again:
            np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "i32"), np.full(N, 100, np.int32))

    def test_memory_of_another_stream_is_not_reused_while_in_use(self, cubeplug_client: Any) -> None:
        add_from = gates.kernel(cubeplug_client, kernels.ADD_FROM)
        add_one = gates.kernel(cubeplug_client, kernels.ADD_ONE)
        with cubeplug_client.stream() as owner:
            src = cubeplug_client.create(np.full(N, 2, np.int32))
            cubeplug_client.sync()
        with cubeplug_client.stream():
            dst = cubeplug_client.create(np.zeros(N, np.int32))
            cubeplug_client.launch(add_from, kernels.cubes(N), [src, dst], [N])  # first use: waits
            cubeplug_client.sync()
            for _ in range(20):
                cubeplug_client.launch(add_one, kernels.cubes(N), [dst], [N])
            cubeplug_client.launch(add_from, kernels.cubes(N), [src, dst], [N])  # synced: no wait
            del src  # the owner stream's pools must keep the slice until this stream's work is done
            with stream_scope(owner):
                again = [cubeplug_client.create(np.full(N, 9, np.int32)) for _ in range(4)]
            got = cubeplug_client.to_numpy(dst, "i32")
        np.testing.assert_array_equal(got, np.full(N, 24, np.int32))
        for h in again:
            np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "i32"), np.full(N, 9, np.int32))

    def test_flush_and_sync(self, cubeplug_client: Any) -> None:
        h = cubeplug_client.create(np.zeros(N, np.int32))
        _chain(cubeplug_client, h, 10)
        cubeplug_client.flush()
        cubeplug_client.sync()
        cubeplug_client.sync(all_streams=True)
        with cubeplug_client.stream() as a, cubeplug_client.stream() as b:
            assert a != b
        assert (cubeplug_client.to_numpy(h, "i32") == 10).all()
