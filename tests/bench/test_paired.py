"""Paired figures: alternation, per-round ratios and their spread."""

from __future__ import annotations

import pytest

from cubeplug.bench.paired import Paired, paired, paired_set
from cubeplug.bench.timing import Figure


def _sampler(name: str, values: list[float], calls: list[str]):  # type: ignore[no-untyped-def]
    it = iter(values)

    def sample() -> Figure:
        calls.append(name)
        v = next(it)
        return Figure(v, v)

    return sample


def test_sides_alternate_and_each_round_gives_one_ratio() -> None:
    calls: list[str] = []
    p = paired(_sampler("ours", [2.0, 4.0, 6.0, 8.0], calls), _sampler("raw", [1.0, 2.0, 2.0, 2.0], calls), 4)
    assert calls == ["ours", "raw", "raw", "ours", "ours", "raw", "raw", "ours"]
    assert p.ratios() == [2.0, 2.0, 3.0, 4.0]
    assert p.ratio() == 2.5 and p.ratio(invert=True) == pytest.approx(0.4167, abs=1e-4)
    spread = p.spread()
    assert spread == {"iqr": [2.0, 3.25], "min": 2.0, "max": 4.0, "rounds": 4}
    assert p.ours_figure == Figure(5.0, 2.0) and p.theirs_figure == Figure(2.0, 1.0)


def test_no_raw_side_gives_our_figure_alone() -> None:
    calls: list[str] = []
    p = paired(_sampler("ours", [1.0, 3.0, 2.0], calls), None, 3)
    assert p.theirs_figure is None and p.ratio() is None and p.spread() is None
    assert p.ours_figure == Figure(2.0, 1.0)


def test_a_raw_library_without_the_path_is_asked_once() -> None:
    asked: list[int] = []

    def nothing() -> Figure | None:
        asked.append(1)
        return None

    p = paired(lambda: Figure(1.0, 1.0), nothing, 5)
    assert len(asked) == 1 and p.ratio() is None and len(p.ours) == 5


def test_a_set_shares_the_raw_samples_and_rotates_the_order() -> None:
    calls: list[str] = []
    pairs = paired_set(
        {"a": _sampler("a", [2.0, 2.0, 2.0], calls), "b": _sampler("b", [3.0, 3.0, 3.0], calls)},
        _sampler("raw", [1.0, 2.0, 4.0], calls),
        3,
    )
    assert calls == ["a", "b", "raw", "b", "raw", "a", "raw", "a", "b"]
    assert pairs["a"].theirs == pairs["b"].theirs == (1.0, 2.0, 4.0)
    assert pairs["a"].ratios() == [2.0, 1.0, 0.5] and pairs["b"].ratio() == 1.5


def test_a_single_round_has_a_degenerate_spread() -> None:
    p = Paired((2.0,), (1.0,))
    assert p.spread() == {"iqr": [2.0, 2.0], "min": 2.0, "max": 2.0, "rounds": 1}
