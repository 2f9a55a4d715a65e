"""Helper threads in tests: an exception in the thread fails the waiting test at once, with that exception.

A plain ``threading.Thread`` swallows its target's exception (it only reaches ``threading.excepthook``),
so a test waiting on an event the thread would have set waits out its whole timeout: on a backend
that cannot compile, test after test. :class:`Worker` keeps the exception and every wait re-raises
it as soon as the thread has died.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

#: How long a wait lasts while the thread lives: long, since a failing thread ends it at once.
TIMEOUT = 120.0
#: How often a wait looks at the thread while the event is not set (seconds).
POLL = 0.01


class Worker:
    """A started helper thread that keeps its target's exception for the test to raise."""

    def __init__(self, target: Callable[[], Any], name: str = "cubeplug-test-worker") -> None:
        self.error: BaseException | None = None
        self._target = target
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._target()
        except BaseException as exc:  # kept for the test's thread, which raises it
            self.error = exc

    def _raise_if_failed(self) -> None:
        if self.error is not None:
            raise self.error

    def wait_for(self, event: threading.Event, what: str, timeout: float = TIMEOUT) -> None:
        """Return once ``event`` is set; re-raise the thread's exception as soon as it has one."""
        deadline = time.monotonic() + timeout
        while not event.wait(POLL):
            self._raise_if_failed()
            if not self._thread.is_alive() and not event.is_set():
                raise AssertionError(f"{what}: the helper thread ended without it")
            if time.monotonic() > deadline:
                raise AssertionError(f"{what} (not within {timeout:.0f} s)")

    def join(self, timeout: float = TIMEOUT) -> None:
        """Wait for the thread to end; re-raise its exception; AssertionError if it outlives ``timeout``."""
        self._thread.join(timeout)
        self._raise_if_failed()
        if self._thread.is_alive():
            raise AssertionError(f"the helper thread {self._thread.name} did not end within {timeout:.0f} s")
