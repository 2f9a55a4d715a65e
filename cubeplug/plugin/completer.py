"""Completing work off the caller's thread: the completer thread and event-completed futures.

A backend's ``read`` returns a future at once; the bytes come back when the device's copies have
completed. :class:`Completer` is the thread that waits for them, one task after another in
submission order, so that callbacks and ``concurrent.futures.wait`` work without anyone asking for
the result; each backend has one per server. :class:`EventFuture` is the future of such a read when
the device signals completion with an event: whoever comes first, the caller in ``result()`` or
the completer thread, waits for the event and builds the result, exactly once.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, Protocol, TypeVar

R = TypeVar("R")


class Resolvable(Protocol):
    """A task the default completer runs: something with a ``resolve()`` (an :class:`EventFuture`)."""

    def resolve(self) -> None:
        """Complete the task (it may block); called once by the completer thread."""


def _resolve(task: Resolvable) -> None:
    task.resolve()


def call_when_done(
    wait: Callable[[Any], None], event: Any, callback: Callable[[BaseException | None], Any]
) -> None:
    """``wait(event)``, then ``callback(None)``, or ``callback(error)`` when the wait raised it."""
    error: BaseException | None = None
    try:
        wait(event)
    except BaseException as e:  # the work before the event failed: the callback reports it
        error = e
    callback(error)


class Completer:
    """A daemon thread that runs ``run(*task)`` for each submitted task, in submission order.

    By default a task is one object with a ``resolve()`` (:class:`EventFuture`). A task that
    raises does not stop the thread: it reports its own failure (a future sets its exception).
    """

    def __init__(self, name: str = "cubeplug-completer", run: Callable[..., object] = _resolve) -> None:
        self._run_task = run
        self._queue: queue.SimpleQueue[tuple[Any, ...] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, *task: Any) -> None:
        """Run ``run(*task)`` on the thread, after every task submitted before."""
        self._queue.put(task)

    @property
    def thread(self) -> threading.Thread:
        """The completer thread."""
        return self._thread

    def close(self, timeout: float = 10) -> None:
        """Stop the thread after the tasks already submitted (and wait for that, unless on the thread)."""
        self._queue.put(None)
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        get, run = self._queue.get, self._run_task
        while True:
            task = get()
            if task is None:
                return
            try:
                run(*task)
            except BaseException:  # a task's own failure must not stop the thread
                pass
            # Drop the task (and what it holds: host buffers, events) before waiting for the next.
            del task


class EventFuture(Future[R], Generic[R]):
    """A future completed when a device event fires, then by ``finish()`` (which builds the result).

    ``wait(event)`` blocks until the event completed (raising the device's error if the work before
    it failed). ``result()`` completes the future on the calling thread when the completer thread
    has not yet, so a blocking read costs no thread hand-off; callbacks and
    ``concurrent.futures.wait`` work too.
    """

    def __init__(self, event: Any, finish: Callable[[], R], wait: Callable[[Any], None]) -> None:
        super().__init__()
        self._event = event
        self._finish: Callable[[], R] | None = finish
        self._wait_fn = wait
        self._resolve_lock = threading.Lock()

    def resolve(self) -> None:
        """Wait for the event and set the result (once; later calls do nothing)."""
        if self._finish is None:
            return
        with self._resolve_lock:
            finish = self._finish
            if finish is None:
                return
            self._finish = None
            if not self.set_running_or_notify_cancel():
                self._event = None
                return
            try:
                if self._event is not None:
                    self._wait_fn(self._event)
                value = finish()
            except BaseException as e:
                self.set_exception(e)
            else:
                self.set_result(value)
            finally:
                self._event = None

    def result(self, timeout: float | None = None) -> R:
        """The result, waiting for the device if needed."""
        self.resolve()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception, waiting for the device if needed."""
        self.resolve()
        return super().exception(timeout)
