"""Anchors per level and AutotuneKey."""

from __future__ import annotations

import pytest

from cubeplug import ConfigError
from cubeplug.core.tune import LEVELS, AutotuneKey, anchor


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("minimal", [1, 4, 4, 16, 16, 1024, 16384, 4096, 16384]),
        ("balanced", [1, 2, 4, 8, 8, 1024, 8192, 4096, 8192]),
        ("extensive", [1, 2, 3, 6, 6, 1024, 6144, 4096, 6144]),
        ("full", [1, 2, 3, 5, 6, 1000, 5000, 4096, 4097]),
    ],
)
def test_anchor_by_level(level: str, expected: list[int]) -> None:
    assert [anchor(v, level) for v in (1, 2, 3, 5, 6, 1000, 5000, 4096, 4097)] == expected


@pytest.mark.parametrize("level", LEVELS)
def test_anchors_never_shrink_and_cap_at_the_maximum(level: str) -> None:
    for v in range(1, 3000):
        assert anchor(v, level) >= v
    assert anchor(0, level) == 0
    assert anchor(10**9, level, maximum=1 << 20) == 1 << 20
    assert anchor(1 << 20, level, maximum=1 << 20) == 1 << 20


def test_anchors_bucket_sizes_coarser_at_lower_levels() -> None:
    counts = {lv: len({anchor(v, lv) for v in range(1, 1 << 16)}) for lv in LEVELS}
    assert counts["minimal"] < counts["balanced"] < counts["extensive"] < counts["full"]


def test_unknown_level_is_a_config_error() -> None:
    with pytest.raises(ConfigError, match="minimal, balanced, extensive, full"):
        anchor(5, "fastest")


def test_autotune_key() -> None:
    a = AutotuneKey(("n", 1024), ("vec", True))
    assert a == AutotuneKey.of(n=1024, vec=True)
    assert hash(a) == hash(AutotuneKey.of(n=1024, vec=True))
    assert a != AutotuneKey.of(n=1024, vec=False)
    assert str(a) == "n=1024,vec=1"
    assert a["n"] == 1024 and a.get("missing", 3) == 3 and dict(a) == {"n": 1024, "vec": True}
    with pytest.raises(KeyError):
        a["missing"]
