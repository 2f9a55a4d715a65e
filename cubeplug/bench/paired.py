"""Both sides of a figure measured in alternation, so that a ratio holds while the machine's speed drifts.

Each round takes one sample of cubeplug's side and one of the raw library's, in alternating order
(ours first in even rounds, theirs first in odd ones), and keeps the ratio of the two. The ratio
reported is the median of the per-round ratios, with its interquartile range, minimum and maximum:
on a shared, noisy machine a ratio of two unpaired medians moved 2-3x between runs (the PoCL launch
ratio read 1.0 in the paired bench script and 2.5 in the unpaired quick bench of the same build).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from cubeplug.bench.timing import Figure

Sample = Callable[[], Figure]
#: The raw side may have no such path (a staged upload on NumPy): None from its first sample.
RawSample = Callable[[], Figure | None]


@dataclass(frozen=True)
class Paired:
    """Per-round samples of both sides (seconds per operation) and the ratio of each round."""

    ours: tuple[float, ...]
    theirs: tuple[float, ...]

    @property
    def ours_figure(self) -> Figure:
        """Our side: median and best over the rounds."""
        return Figure(statistics.median(self.ours), min(self.ours))

    @property
    def theirs_figure(self) -> Figure | None:
        """The raw library's side (None when there is no raw baseline)."""
        return Figure(statistics.median(self.theirs), min(self.theirs)) if self.theirs else None

    def ratios(self, invert: bool = False) -> list[float]:
        """ours / theirs per round (theirs / ours with ``invert``: a ratio of rates such as GB/s)."""
        pairs = [(a, b) for a, b in zip(self.ours, self.theirs) if a > 0 and b > 0]
        return [b / a if invert else a / b for a, b in pairs]

    def ratio(self, invert: bool = False) -> float | None:
        """The median of the per-round ratios (None without a raw side)."""
        values = self.ratios(invert)
        return round(statistics.median(values), 4) if values else None

    def spread(self, invert: bool = False) -> dict[str, Any] | None:
        """The per-round ratios' interquartile range, minimum and maximum, and how many rounds."""
        values = sorted(self.ratios(invert))
        if not values:
            return None
        q1, _, q3 = statistics.quantiles(values, n=4, method="inclusive") if len(values) > 1 else values * 3
        return {
            "iqr": [round(q1, 4), round(q3, 4)],
            "min": round(values[0], 4),
            "max": round(values[-1], 4),
            "rounds": len(values),
        }


def paired(ours: Sample, theirs: RawSample | None, rounds: int) -> Paired:
    """``rounds`` samples of each side in alternation; each sample callable makes its own warm-up."""
    return paired_set({"ours": ours}, theirs, rounds)["ours"]


def paired_set(ours: dict[str, Sample], theirs: RawSample | None, rounds: int) -> dict[str, Paired]:
    """Several of our figures against one raw figure: each round samples every side once, in an order
    rotated round by round, so that each of ours is paired with the same raw samples."""
    names = list(ours)
    mine: dict[str, list[float]] = {name: [] for name in names}
    base: list[float] = []
    sides: list[str | None] = [*names, None]
    for i in range(max(1, rounds)):
        shift = i % len(sides)
        for side in sides[shift:] + sides[:shift]:
            if side is not None:
                mine[side].append(ours[side]().median)
            elif theirs is not None:
                fig = theirs()
                if fig is None:
                    theirs = None  # the library has no such path: our side alone
                else:
                    base.append(fig.median)
    return {name: Paired(tuple(mine[name]), tuple(base)) for name in names}
