"""A stateful test of the client on the CPU backend against a numpy model, with work from 4 threads.

Every rule runs its client calls on one of four worker threads, each with its own stream, and
returns as soon as the work is queued: launches on one stream followed by reads on another only
give the model's answer if cross-stream ordering is right.
"""

from __future__ import annotations

import gc
import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

import numpy as np
from hypothesis import settings
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, consumes, invariant, precondition, rule

from cubeplug import Buffer, Kernel, Scalar
from tests.conftest import make_cpu_client
from tests.core.kernels import ADD_ONE


def _add(launch, x, y, n):  # type: ignore[no-untyped-def]
    y[:n] += x[:n]


ADD = Kernel("add", [Buffer("x", "i32", "read"), Buffer("y", "i32"), Scalar("n", "u32")], {"python": _add})


class Worker:
    """A thread of its own (so a stream of its own) that runs calls one at a time."""

    def __init__(self) -> None:
        self._q: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        self._t = threading.Thread(target=self._run, daemon=True)
        self._t.start()

    def call(self, fn: Callable[[], Any]) -> Any:
        fut: Future[Any] = Future()
        self._q.put((fn, fut))
        return fut.result(timeout=30)

    def stop(self) -> None:
        self._q.put(None)
        self._t.join()

    def _run(self) -> None:
        while (item := self._q.get()) is not None:
            fn, fut = item
            try:
                fut.set_result(fn())
            except BaseException as e:
                fut.set_exception(e)
            del item, fn, fut  # hold nothing (no handle) between calls


class Entry:
    """A live handle and the model of its content."""

    def __init__(self, handle: Any, model: np.ndarray) -> None:
        self.handle = handle
        self.model = model


threads = st.integers(0, 3)


class ClientMachine(RuleBasedStateMachine):
    entries = Bundle("entries")

    def __init__(self) -> None:
        super().__init__()
        self.client = make_cpu_client()
        self.workers = [Worker() for _ in range(4)]
        self.live: list[Entry] = []
        self.mismatches = 0

    def on(self, t: int, fn: Callable[[], Any]) -> Any:
        return self.workers[t].call(fn)

    @rule(target=entries, t=threads, data=st.lists(st.integers(-1000, 1000), min_size=1, max_size=64))
    def create(self, t: int, data: list[int]) -> Entry:
        arr = np.array(data, dtype=np.int32)
        entry = Entry(self.on(t, lambda: self.client.create(arr)), arr.copy())
        self.live.append(entry)
        return entry

    @rule(t=threads, e=entries, start=st.integers(0, 63), end=st.integers(0, 63))
    def add_one_view(self, t: int, e: Entry, start: int, end: int) -> None:
        n = len(e.model)
        start, end = min(start, n - 1), min(end, n - 1 - min(start, n - 1))
        view = e.handle.offset_start(4 * start).offset_end(4 * end)
        self.on(t, lambda: self.client.launch(ADD_ONE, 1, [view]))
        e.model[start : n - end] += 1

    @rule(t=threads, src=entries, dst=entries)
    def add(self, t: int, src: Entry, dst: Entry) -> None:
        n = min(len(src.model), len(dst.model))
        self.on(t, lambda: self.client.launch(ADD, 1, [src.handle, dst.handle], [n]))
        dst.model[:n] += src.model[:n]

    @rule(t=threads, e=entries)
    def read(self, t: int, e: Entry) -> None:
        got = self.on(t, lambda: self.client.to_numpy(e.handle, "i32"))
        if not np.array_equal(got, e.model):
            self.mismatches += 1
        np.testing.assert_array_equal(got, e.model)

    @rule(target=entries, t=threads, e=entries)
    def copy(self, t: int, e: Entry) -> Entry:
        moved = self.on(t, lambda: self.client.to_client(e.handle, self.client))
        entry = Entry(moved, e.model.copy())
        self.live.append(entry)
        return entry

    @rule(e=consumes(entries))
    def drop(self, e: Entry) -> None:
        self.live.remove(e)
        e.handle.drop()

    @precondition(lambda self: len(self.live) > 0)
    @rule(t=threads)
    def cleanup(self, t: int) -> None:
        self.on(t, self.client.memory_cleanup)

    @invariant()
    def usage_is_consistent(self) -> None:
        usage = self.client.memory_usage()
        assert usage.bytes_in_use >= sum(e.handle.size for e in self.live)
        assert usage.bytes_reserved >= usage.bytes_in_use + usage.bytes_padding

    def teardown(self) -> None:
        assert self.mismatches == 0
        for e in self.live:
            e.handle.drop()
        self.live.clear()
        self.client.sync(all_streams=True)
        gc.collect()
        try:
            assert self.client.memory_usage().bytes_in_use == 0
        finally:
            self.client.close()
            for w in self.workers:
                w.stop()


ClientMachine.TestCase.settings = settings(max_examples=100, stateful_step_count=50, deadline=None)
TestClientMachine = ClientMachine.TestCase
