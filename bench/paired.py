"""Paired timing for the bench scripts: two loops run in alternation, the ratio taken per round, its
median reported; a thin adapter over :mod:`cubeplug.bench.paired`, which ``cubeplug bench`` uses.

The GPU machine's host is shared and its speed drifts by tens of percent within a minute, so two
figures measured one after the other can disagree by more than the difference they compare. Each
round times ``a`` and ``b`` back to back (in ABBA order over pairs of rounds) and keeps their ratio;
drift slower than a round cancels, and the median over rounds ignores the rounds a burst of other
load hit.
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from collections.abc import Callable
from typing import Any

import cubeplug
from cubeplug.bench import paired as pairing
from cubeplug.bench.timing import Figure
from cubeplug.core.client import ComputeClient


def paired(
    a: Callable[[int], None],
    b: Callable[[int], None],
    n: int,
    rounds: int = 30,
    drain: Callable[[], None] | None = None,
    device: ComputeClient | None = None,
) -> dict[str, Any]:
    """Microseconds per iteration of ``a(n)`` and ``b(n)`` (medians) and the median of a/b per round.

    Host time by default: ``fn(n)`` then ``drain()``, timed with ``perf_counter``. With a ``device``
    client, each sample is ``device.profile`` around the ``n`` calls instead (the device time of the
    loop's launches, per call), the figure ``cubeplug bench`` takes with ``device=True``; the
    warm-up then ends in ``drain`` if given, else ``device.sync``."""
    finish = drain or (device.sync if device is not None else (lambda: None))
    a(max(1, n // 10))
    b(max(1, n // 10))
    finish()

    def sample(fn: Callable[[int], None]) -> Callable[[], Figure]:
        def timed() -> Figure:
            if device is not None:
                _, duration = device.profile(fn, n)
                seconds = duration.seconds() / n
            else:
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


def repeat(fn: Callable[[], Any]) -> Callable[[int], None]:
    """``fn`` as a loop of ``k`` calls, the shape :func:`paired` times."""

    def loop(k: int) -> None:
        for _ in range(k):
            fn()

    return loop


def versus(fig: dict[str, Any], a: str = "lang", b: str = "hand") -> dict[str, Any]:
    """A :func:`paired` figure as a row of the lang-against-hand scripts: each side's microseconds
    (``<a>_us``, ``<b>_us``), the time ratio a/b with its spread, and the speed b/a."""
    ratio = fig["ratio_median"]
    return {f"{a}_us": fig["a_us"], f"{b}_us": fig["b_us"], "time_ratio": ratio,
            "time_ratio_iqr": fig["ratio_iqr"], "speed": round(1 / ratio, 3) if ratio else None}


def run_header(**extra: Any) -> dict[str, Any]:
    """What every result file starts with: host, machine, Python, date, the command's arguments."""
    return {
        "host": platform.node(), "machine": f"{platform.machine()}, {os.cpu_count()} cpus",
        "python": platform.python_version(), "date": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "argv": sys.argv[1:], **extra,
    }  # fmt: skip


def each_backend(
    backends: str, measure: Callable[[str], dict[str, Any]], results: dict[str, Any], out: str | None
) -> None:
    """``results[backend] = measure(backend)`` for each comma-separated backend (a CubeplugError is
    the backend's ``error``), writing ``out`` after each one: a later crash keeps the earlier figures."""
    for backend in backends.split(","):
        try:
            results[backend] = measure(backend)
        except cubeplug.CubeplugError as e:
            results[backend] = {"error": f"{type(e).__name__}: {e}"}
            print(backend, results[backend], flush=True)
        if out:
            with open(out, "w") as f:
                json.dump(results, f, indent=2)
