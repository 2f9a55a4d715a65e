"""Paired timing for the bench scripts: two loops run in alternation, the ratio taken per round, its
median reported; a thin adapter over :mod:`cubeplug.bench.paired`, which ``cubeplug bench`` uses.

The GPU machine's host is shared and its speed drifts by tens of percent within a minute, so two
figures measured one after the other can disagree by more than the difference they compare. Each
round times ``a`` and ``b`` back to back (in ABBA order over pairs of rounds) and keeps their ratio;
drift slower than a round cancels, and the median over rounds ignores the rounds a burst of other
load hit.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from typing import Any

from cubeplug.bench import paired as pairing
from cubeplug.bench.timing import Figure


def paired(
    a: Callable[[int], None],
    b: Callable[[int], None],
    n: int,
    rounds: int = 30,
    drain: Callable[[], None] | None = None,
) -> dict[str, Any]:
    """Microseconds per iteration of ``a(n)`` and ``b(n)`` (medians) and the median of a/b per round."""
    finish = drain or (lambda: None)
    a(max(1, n // 10))
    b(max(1, n // 10))
    finish()

    def sample(fn: Callable[[int], None]) -> Callable[[], Figure]:
        def timed() -> Figure:
            t0 = time.perf_counter()
            fn(n)
            finish()
            seconds = (time.perf_counter() - t0) / n
            return Figure(seconds, seconds)

        return timed

    pair = pairing.paired(sample(a), sample(b), rounds)
    spread = pair.spread() or {"iqr": [None, None]}
    return {
        "a_us": round(statistics.median(pair.ours) * 1e6, 3),
        "b_us": round(statistics.median(pair.theirs) * 1e6, 3),
        "ratio_median": round(pair.ratio() or 0.0, 3),
        "ratio_iqr": [round(q, 3) for q in spread["iqr"]],
        "rounds": rounds,
        "n": n,
    }
