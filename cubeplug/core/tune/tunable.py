"""Tunables: named candidate implementations of one operation, and the set a tuner picks from.

A :class:`TunableSet` holds the candidates (``fn(client, *inputs) -> output``), the function that
makes an :class:`~cubeplug.core.tune.key.AutotuneKey` from the inputs, and optionally a reference
and a comparison used by output checks. Its checksum (of the candidate names, in order) is stored
with every persisted result, so adding, removing or renaming a candidate invalidates old results.
"""

from __future__ import annotations

import hashlib
import weakref
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from cubeplug.core.errors import ValidationError
from cubeplug.core.tune.key import AutotuneKey

#: ``key(client, level, *inputs) -> AutotuneKey``
KeyFn = Callable[..., AutotuneKey]
#: ``compare(client, expected, got, *inputs) -> None`` when equivalent, else a message saying how not.
CompareFn = Callable[..., "str | None"]


@dataclass(frozen=True)
class Tunable:
    """One candidate: a name, ``fn(client, *inputs) -> output``, a priority and when it can run.

    ``priority`` decides which levels try it: 2 at every level, 1 from ``balanced`` up, 0 only at
    ``extensive`` and ``full``. ``applicable(client, key)`` says whether it can run for a key on a
    client's device (alignment, vector widths, cube size limits); None means always.
    """

    name: str
    fn: Callable[..., Any]
    priority: int = 1
    applicable: Callable[[Any, AutotuneKey], bool] | None = None

    def can_run(self, client: Any, key: AutotuneKey) -> bool:
        """True when this candidate can run for ``key`` on ``client``."""
        return self.applicable is None or bool(self.applicable(client, key))


def checksum_of(names: Iterable[str]) -> str:
    """The checksum of candidate names, in order."""
    return hashlib.sha256("\n".join(names).encode()).hexdigest()[:16]


class TunableSet:
    """The candidates of one operation, how to key its inputs and, optionally, how to check outputs."""

    def __init__(
        self,
        name: str,
        tunables: Iterable[Tunable],
        key: KeyFn,
        *,
        compare: CompareFn | None = None,
        reference: Callable[..., Any] | None = None,
    ) -> None:
        self.name = name
        self.tunables: tuple[Tunable, ...] = tuple(tunables)
        if not self.tunables:
            raise ValidationError(f"tunable set {name!r} has no candidates")
        names = [t.name for t in self.tunables]
        if len(set(names)) != len(names):
            raise ValidationError(f"tunable set {name!r}: candidate names must be unique, got {names}")
        self.key = key
        self.compare = compare
        self.reference = reference
        self.by_name: dict[str, Tunable] = {t.name: t for t in self.tunables}
        self.checksum = checksum_of(names)
        #: The tuner of each server this set ran on (see :func:`cubeplug.core.tune.tuner.autotune`).
        self.tuners: weakref.WeakKeyDictionary[Any, Any] = weakref.WeakKeyDictionary()

    @property
    def names(self) -> tuple[str, ...]:
        """The candidate names, in order."""
        return tuple(t.name for t in self.tunables)

    def candidates(self, client: Any, key: AutotuneKey, min_priority: int = 0) -> list[Tunable]:
        """The candidates that can run for ``key``, of at least ``min_priority`` when any such can."""
        runnable = [t for t in self.tunables if t.can_run(client, key)]
        preferred = [t for t in runnable if t.priority >= min_priority]
        return preferred or runnable

    def __repr__(self) -> str:
        return f"TunableSet({self.name!r}, {list(self.names)})"
