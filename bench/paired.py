"""Paired timing: two loops run in alternation, the ratio taken per round, its median reported.

The GPU machine's host is shared and its speed drifts by tens of percent within a minute, so two
figures measured one after the other can disagree by more than the difference they compare. Here
each round times ``a`` and ``b`` back to back (in ABBA order over pairs of rounds) and keeps their
ratio; drift slower than a round cancels, and the median over rounds ignores the rounds a burst of
other load hit.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any


def paired(
    a: Callable[[int], None],
    b: Callable[[int], None],
    n: int,
    rounds: int = 30,
    drain: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Microseconds per iteration of ``a(n)`` and ``b(n)`` (medians) and the median of a/b per round."""
    drain = drain or (lambda: None)
    a(max(1, n // 10))
    b(max(1, n // 10))
    drain()
    ta: list[float] = []
    tb: list[float] = []

    def timed(fn: Callable[[int], None]) -> float:
        t0 = time.perf_counter()
        fn(n)
        drain()
        return (time.perf_counter() - t0) / n * 1e6

    for i in range(rounds):
        if i % 2:
            tb.append(timed(b))
            ta.append(timed(a))
        else:
            ta.append(timed(a))
            tb.append(timed(b))
    ratios = [x / y for x, y in zip(ta, tb, strict=True)]
    return {
        "a_us": round(statistics.median(ta), 3),
        "b_us": round(statistics.median(tb), 3),
        "ratio_median": round(statistics.median(ratios), 3),
        "ratio_iqr": [round(q, 3) for q in statistics.quantiles(ratios, n=4)[::2]],
        "rounds": rounds,
        "n": n,
    }
