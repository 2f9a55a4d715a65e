"""Waiting for what a backend may finish a moment after a sync: released bindings, freed memory."""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

#: How long the suite waits for memory held by completed work to be released.
TIMEOUT = 10.0


def eventually(
    attempt: Callable[[], T], retry_on: type[BaseException] = AssertionError, timeout: float = TIMEOUT
) -> T:
    """``attempt()``'s result, retrying (with a garbage collection) while it raises ``retry_on``."""
    deadline = time.monotonic() + timeout
    delay = 0.001
    while True:
        try:
            return attempt()
        except retry_on:
            if time.monotonic() > deadline:
                raise
        gc.collect()
        time.sleep(delay)
        delay = min(delay * 2, 0.1)


def wait_until(predicate: Callable[[], bool], what: str, timeout: float = TIMEOUT) -> None:
    """Return once ``predicate()`` is true; AssertionError naming ``what`` after ``timeout`` seconds."""

    def check() -> None:
        assert predicate(), f"{what} (still false after {timeout:.0f} s)"

    eventually(check, AssertionError, timeout)
