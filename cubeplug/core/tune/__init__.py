"""Autotune: candidates, anchored keys, scoring, elimination, memory and disk caches.

Settings: ``[autotune]`` in docs/config.md.

An operation declares a :class:`TunableSet` and calls :func:`autotune`; the first call for a key
benchmarks the candidates on the client's device, later calls (and later processes, through the
SQLite cache) reuse the choice. ``[autotune] level`` (minimal / balanced / extensive / full) sets
the key anchors and how thoroughly candidates are measured; ``[autotune] cache = false`` keeps
results in memory only; ``[autotune.bench]`` tunes the measuring (see :mod:`.settings`).
"""

from __future__ import annotations

from cubeplug.core.paths import ENV_CACHE_DIR, cache_dir
from cubeplug.core.tune.cache import (
    DB_NAME,
    CacheEntry,
    Namespace,
    PersistentCache,
    TuneCache,
    TuneCacheWarning,
    default_db_path,
    persistent_cache,
    reset_persistent_caches,
)
from cubeplug.core.tune.key import LEVELS, AutotuneKey, anchor
from cubeplug.core.tune.settings import LEVEL_SETTINGS, BenchSettings, bench_settings
from cubeplug.core.tune.tunable import Tunable, TunableSet, checksum_of
from cubeplug.core.tune.tuner import (
    Outcome,
    Tuner,
    TuneResult,
    TunerStats,
    autotune,
    device_id,
    new_tuner,
    score,
    trimmed,
    tuner_for,
)

__all__ = [
    "DB_NAME",
    "ENV_CACHE_DIR",
    "LEVELS",
    "LEVEL_SETTINGS",
    "AutotuneKey",
    "BenchSettings",
    "CacheEntry",
    "Namespace",
    "Outcome",
    "PersistentCache",
    "TuneCache",
    "TuneCacheWarning",
    "TuneResult",
    "Tunable",
    "TunableSet",
    "Tuner",
    "TunerStats",
    "anchor",
    "autotune",
    "bench_settings",
    "cache_dir",
    "checksum_of",
    "default_db_path",
    "device_id",
    "new_tuner",
    "persistent_cache",
    "reset_persistent_caches",
    "score",
    "trimmed",
    "tuner_for",
]
