"""Autotune keys: sizes bucketed to anchors, so one tuning result serves a whole range of sizes.

An :class:`AutotuneKey` is a tuple of named fields. Sizes go through :func:`anchor` first, which
rounds them up to the next anchor of the autotune level (``[autotune] level``):

============  ==========================================  =================================
level         anchors                                     e.g. 1000 -> / 5000 ->
============  ==========================================  =================================
minimal       powers of 4                                 1024 / 16384
balanced      powers of 2 (the default)                   1024 / 8192
extensive     2^k and 3 * 2^(k-1) (two per octave)        1024 / 6144
full          the exact size: every size is tuned alone   1000 / 5000
============  ==========================================  =================================

Fields that decide which candidates can run at all (alignment, a vector width, a dtype) must be
exact fields of the key, never anchored: every size in a bucket has to accept the cached choice.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from cubeplug.core.errors import ConfigError

#: The autotune levels, from the cheapest tuning to the most thorough.
LEVELS = ("minimal", "balanced", "extensive", "full")


def check_level(level: str) -> str:
    """``level`` if it is an autotune level, else ConfigError listing them."""
    if level not in LEVELS:
        raise ConfigError(
            f"unknown autotune level {level!r}", key="autotune.level", allowed=", ".join(LEVELS)
        )
    return level


def anchor(value: int, level: str = "balanced", maximum: int | None = None) -> int:
    """``value`` rounded up to the next anchor of ``level`` (0 stays 0), capped at ``maximum``."""
    value = int(value)
    if value <= 0:
        return 0
    if maximum is not None and value >= maximum:
        return int(maximum)
    if level == "full":
        out = value
    elif level == "balanced":
        out = 1 << (value - 1).bit_length()
    elif level == "minimal":
        bits = (value - 1).bit_length()
        out = 1 << (bits + (bits & 1))
    elif level == "extensive":
        out = 1 << (value - 1).bit_length()
        if out >= 4 and value <= 3 * (out >> 2):
            out = 3 * (out >> 2)
    else:
        check_level(level)
        raise AssertionError  # pragma: no cover - check_level raised
    return out if maximum is None else min(out, int(maximum))


class AutotuneKey:
    """Named key fields (anchored sizes and exact flags), hashable, printed as ``n=1024,vec=1``."""

    __slots__ = ("_fields", "_hash")

    def __init__(self, *fields: tuple[str, Any]) -> None:
        self._fields = tuple((str(k), v) for k, v in fields)
        self._hash = hash(self._fields)

    @classmethod
    def of(cls, **fields: Any) -> AutotuneKey:
        """A key from keyword fields, in the order given."""
        return cls(*fields.items())

    @property
    def fields(self) -> tuple[tuple[str, Any], ...]:
        """The (name, value) pairs."""
        return self._fields

    def __getitem__(self, name: str) -> Any:
        for k, v in self._fields:
            if k == name:
                return v
        raise KeyError(name)

    def get(self, name: str, default: Any = None) -> Any:
        """A field's value, or ``default`` when the key has no such field."""
        for k, v in self._fields:
            if k == name:
                return v
        return default

    def __iter__(self) -> Iterator[tuple[str, Any]]:
        return iter(self._fields)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, AutotuneKey) and self._fields == other._fields

    def __hash__(self) -> int:
        return self._hash

    def __str__(self) -> str:
        return ",".join(f"{k}={_text(v)}" for k, v in self._fields)

    def __repr__(self) -> str:
        return f"AutotuneKey({self})"


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return str(int(value))
    return str(value)
