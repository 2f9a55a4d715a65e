"""Worker: a helper thread's exception fails the waiting test at once."""

from __future__ import annotations

import threading
import time

import pytest

from cubeplug.testing.threads import Worker


class Boom(Exception):
    pass


def test_wait_for_raises_the_threads_exception_at_once() -> None:
    never = threading.Event()

    def fail() -> None:
        raise Boom("compile failed in the helper thread")

    worker = Worker(fail)
    start = time.monotonic()
    with pytest.raises(Boom, match="compile failed"):
        worker.wait_for(never, "the event", timeout=60)
    assert time.monotonic() - start < 30  # nowhere near the 60 s the wait allows
    with pytest.raises(Boom):
        worker.join()


def test_wait_for_returns_when_the_event_is_set_and_join_passes() -> None:
    ready, go = threading.Event(), threading.Event()
    seen: list[int] = []

    def work() -> None:
        ready.set()
        go.wait(10)
        seen.append(1)

    worker = Worker(work)
    worker.wait_for(ready, "ready")
    go.set()
    worker.join()
    assert seen == [1] and worker.error is None


def test_a_thread_that_ends_without_setting_the_event_is_reported() -> None:
    worker = Worker(lambda: None)
    with pytest.raises(AssertionError, match="ended without it"):
        worker.wait_for(threading.Event(), "the writer queues its work", timeout=60)


def test_a_wait_past_its_timeout_fails_and_a_thread_still_alive_fails_join() -> None:
    stop = threading.Event()
    worker = Worker(lambda: stop.wait(10))
    with pytest.raises(AssertionError, match=r"the event \(not within 0 s\)"):
        worker.wait_for(threading.Event(), "the event", timeout=0.05)
    with pytest.raises(AssertionError, match="did not end"):
        worker.join(timeout=0.05)
    stop.set()
    worker.join()
