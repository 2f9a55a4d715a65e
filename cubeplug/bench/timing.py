"""Timing helpers shared by the cubeplug side and the raw-library side of every figure."""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Figure:
    """A measured duration per operation: median and minimum, in seconds."""

    median: float
    best: float

    def us(self) -> float:
        """The median in microseconds."""
        return self.median * 1e6

    def scaled(self, n: int) -> Figure:
        """The figure per one of ``n`` operations that each sample made."""
        return Figure(self.median / n, self.best / n)


def per_call(fn: Callable[[int], None], n: int, repeats: int, drain: Callable[[], None]) -> Figure:
    """Seconds per call of ``fn(n)`` (which makes ``n`` calls); ``drain`` runs after each repeat, timed.

    One untimed warm-up round runs first. Draining is timed so that queued work is paid for.
    """
    fn(min(n, 100))
    drain()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(n)
        drain()
        samples.append((time.perf_counter() - t0) / n)
    return Figure(statistics.median(samples), min(samples))


def seconds(run: Callable[[], object], repeats: int) -> Figure:
    """Seconds per call of ``run`` (which must block until its work is done), after one warm-up."""
    run()
    samples = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        run()
        samples.append(time.perf_counter() - t0)
    return Figure(statistics.median(samples), min(samples))


def iterations(seconds_once: float, target: float, lo: int = 1, hi: int = 1000) -> int:
    """How many iterations of an operation taking ``seconds_once`` fill about ``target`` seconds."""
    if seconds_once <= 0:
        return hi
    return max(lo, min(hi, int(target / seconds_once)))


def ratio(a: float | None, b: float | None) -> float | None:
    """``a / b`` rounded to 4 digits, or None when either is missing or ``b`` is zero."""
    if a is None or b is None or b == 0:
        return None
    return round(a / b, 4)
