"""How thoroughly the tuner measures: per-level defaults, overridden by ``[autotune] bench.*``.

``[autotune.bench]`` keys (environment: ``CUBEPLUG_AUTOTUNE_BENCH_<KEY>``):

==============  =================================================================  ==========
key             meaning                                                            default
==============  =================================================================  ==========
warmup          untimed runs of each candidate before sampling (compiles it)       1
samples         timed runs of each candidate that survives elimination             by level
eliminate       drop a candidate whose best time exceeds this factor times the     by level
                best candidate's best time after two rounds (0: never)
max_seconds     stop sampling a candidate once its samples took this long          by level
check           compare every candidate's output with the reference's              false
progress        show a progress bar on stderr when it is a terminal                true
==============  =================================================================  ==========
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from cubeplug.core.errors import ConfigError
from cubeplug.core.tune.key import check_level


@dataclass(frozen=True)
class BenchSettings:
    """The measuring plan of one tuning."""

    warmup: int = 1
    samples: int = 7
    eliminate: float = 1.5
    max_seconds: float = 1.0
    check: bool = False
    progress: bool = True
    #: Candidates below this priority are tried only when no other can run.
    min_priority: int = 1


#: The defaults of each autotune level.
LEVEL_SETTINGS: dict[str, BenchSettings] = {
    "minimal": BenchSettings(samples=3, eliminate=1.25, max_seconds=0.5, min_priority=2),
    "balanced": BenchSettings(samples=7, eliminate=1.5, max_seconds=1.0, min_priority=1),
    "extensive": BenchSettings(samples=15, eliminate=2.0, max_seconds=2.0, min_priority=0),
    "full": BenchSettings(samples=25, eliminate=0.0, max_seconds=5.0, min_priority=0),
}

_ALLOWED = {
    "warmup": "an integer >= 0",
    "samples": "an integer >= 1",
    "eliminate": "a number >= 1 (or 0 to never eliminate)",
    "max_seconds": "a number > 0",
    "check": "true or false",
    "progress": "true or false",
}


def _number(key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise _bad(key, value)
    return float(value)


def _bad(key: str, value: Any) -> ConfigError:
    return ConfigError(
        f"bad value for autotune.bench.{key}: {value!r}", key=f"autotune.bench.{key}", allowed=_ALLOWED[key]
    )


def bench_settings(level: str, bench: Mapping[str, Any] | None = None) -> BenchSettings:
    """The settings of ``level`` with ``[autotune] bench.*`` overrides applied; ConfigError if one is bad."""
    settings = LEVEL_SETTINGS[check_level(level)]
    changes: dict[str, Any] = {}
    for key, value in (bench or {}).items():
        if key not in _ALLOWED:
            raise ConfigError(
                f"unknown key autotune.bench.{key}", key=f"autotune.bench.{key}", allowed=", ".join(_ALLOWED)
            )
        if key in ("check", "progress"):
            if not isinstance(value, bool):
                raise _bad(key, value)
            changes[key] = value
            continue
        number = _number(key, value)
        if key in ("warmup", "samples"):
            if not number.is_integer() or number < (0 if key == "warmup" else 1):
                raise _bad(key, value)
            changes[key] = int(number)
        elif key == "eliminate":
            if number != 0 and number < 1:
                raise _bad(key, value)
            changes[key] = number
        else:
            if number <= 0:
                raise _bad(key, value)
            changes[key] = number
    return replace(settings, **changes)
