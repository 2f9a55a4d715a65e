"""The in-memory and persistent caches: hits, checksums, namespaces, and unusable files."""

from __future__ import annotations

import os
import sqlite3
import warnings
from pathlib import Path
from typing import Any

import pytest

from cubeplug.core.tune import (
    CacheEntry,
    Namespace,
    PersistentCache,
    TuneCache,
    TuneCacheWarning,
    Tuner,
    bench_settings,
)
from cubeplug.core.tune import cache as cache_module
from tests.core.tune.fakes import FakeClient, fake_set

TIMES = {"slow": 3e-3, "fast": 1e-3, "mid": 2e-3}
NS = Namespace("0.1.0", "fake:device", "test.fake")


def _tuner(path: Path | None, ns: Namespace = NS) -> Tuner:
    persistent = PersistentCache(path) if path is not None else None
    return Tuner(
        ns.tuner,
        ns.device,
        settings=bench_settings("balanced", {"samples": 3, "progress": False}),
        cache=TuneCache(ns, persistent),
    )


def _warnings(fn: Any) -> tuple[Any, list[warnings.WarningMessage]]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        result = fn()
    return result, [w for w in caught if issubclass(w.category, TuneCacheWarning)]


def test_memory_cache_hit_and_miss() -> None:
    cache = TuneCache(NS)
    assert cache.fastest("k") is None and cache.lookup("k", "k", "sum") is None
    cache.insert("k", "k", CacheEntry("fast", "sum"))
    assert cache.fastest("k") == "fast"


def test_results_persist_across_cache_objects(tmp_path: Path) -> None:
    path = tmp_path / "autotune.sqlite3"
    first = PersistentCache(path)
    assert first.store(NS, "balanced|n=8", CacheEntry("fast", "abc", ({"name": "fast", "min": 1e-3},)))
    first.close()
    second = PersistentCache(path)
    entry = second.load(NS, "balanced|n=8")
    assert entry is not None and entry.fastest == "fast" and entry.checksum == "abc"
    assert entry.outcomes[0]["name"] == "fast"
    assert second.load(Namespace("0.1.0", "fake:other", "test.fake"), "balanced|n=8") is None
    assert second.load(Namespace("0.2.0", "fake:device", "test.fake"), "balanced|n=8") is None
    assert second.summary()[0]["entries"] == 1
    assert second.clear(tuner="other") == 0 and second.clear() == 1


def test_a_second_tuner_reuses_the_persisted_choice_without_benchmarking(tmp_path: Path) -> None:
    path = tmp_path / "autotune.sqlite3"
    tunables = fake_set(list(TIMES))
    client = FakeClient(TIMES)
    assert _tuner(path).execute(tunables, client, 1000) == "fast"
    assert sum(client.profiled.values()) > 0
    again = FakeClient(TIMES)
    tuner = _tuner(path)
    assert tuner.execute(tunables, again, 1000) == "fast"
    assert sum(again.profiled.values()) == 0 and again.calls == {"fast": 1}
    assert (tuner.stats.tunings, tuner.stats.persistent_hits, tuner.stats.runs) == (0, 1, 0)
    assert tuner.results[tunables.key(again, "balanced", 1000)].source == "persistent"


def test_a_checksum_mismatch_tunes_again_and_replaces_the_stale_result(tmp_path: Path) -> None:
    path = tmp_path / "autotune.sqlite3"
    client = FakeClient(TIMES)
    _tuner(path).execute(fake_set(["slow", "mid"]), client, 64)
    grown = fake_set(["slow", "mid", "fast"])
    tuner = _tuner(path)
    assert tuner.execute(grown, FakeClient(TIMES), 64) == "fast"
    assert tuner.stats.tunings == 1 and tuner.stats.persistent_hits == 0
    stored = PersistentCache(path).load(NS, "balanced|n=64")
    assert stored is not None and stored.checksum == grown.checksum and stored.fastest == "fast"


def test_a_stored_choice_that_no_longer_exists_is_tuned_again(tmp_path: Path) -> None:
    path = tmp_path / "autotune.sqlite3"
    tunables = fake_set(["slow", "mid"])
    PersistentCache(path).store(NS, "balanced|n=64", CacheEntry("gone", tunables.checksum))
    tuner = _tuner(path)
    assert tuner.execute(tunables, FakeClient(TIMES), 64) == "mid" and tuner.stats.tunings == 1


def test_a_corrupt_file_degrades_to_memory_with_one_warning(tmp_path: Path) -> None:
    path = tmp_path / "autotune.sqlite3"
    path.write_bytes(b"this is not an SQLite database" * 100)
    persistent = PersistentCache(path)
    ns2 = Namespace("0.1.0", "fake:device", "test.other")

    def run() -> list[str]:
        out = []
        for ns in (NS, ns2):
            tuner = Tuner(
                ns.tuner,
                ns.device,
                settings=bench_settings("balanced", {"samples": 2, "progress": False}),
                cache=TuneCache(ns, persistent),
            )
            tunables = fake_set(list(TIMES), name=ns.tuner)
            out += [tuner.execute(tunables, FakeClient(TIMES), n) for n in (10, 10, 100)]
        return out

    results, caught = _warnings(run)
    assert results == ["fast"] * 6
    assert (
        len(caught) == 1
        and "corrupt" in str(caught[0].message)
        and "cubeplug cache clear" in str(caught[0].message)
    )
    assert persistent.state == "off"
    assert path.read_bytes().startswith(b"this is not")  # left alone


def test_a_directory_that_cannot_be_created_degrades_with_one_warning(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    persistent = PersistentCache(blocker / "sub" / "autotune.sqlite3")
    tuner = Tuner(
        NS.tuner,
        NS.device,
        settings=bench_settings("balanced", {"samples": 2, "progress": False}),
        cache=TuneCache(NS, persistent),
    )
    results, caught = _warnings(
        lambda: [tuner.execute(fake_set(list(TIMES)), FakeClient(TIMES), n) for n in (1, 9, 99)]
    )
    assert results == ["fast"] * 3 and len(caught) == 1 and "cannot create" in str(caught[0].message)
    assert "CUBEPLUG_CACHE_DIR" in str(caught[0].message)


def test_a_read_only_file_is_read_but_not_written(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "autotune.sqlite3"
    tunables = fake_set(list(TIMES))
    _tuner(path).execute(tunables, FakeClient(TIMES), 1000)
    real = cache_module._connect

    def read_only(p: Path, readonly: bool) -> sqlite3.Connection:
        if not readonly:
            raise sqlite3.OperationalError("unable to open database file")
        return real(p, readonly)

    monkeypatch.setattr(cache_module, "_connect", read_only)
    persistent = PersistentCache(path)
    tuner = Tuner(
        NS.tuner,
        NS.device,
        settings=bench_settings("balanced", {"samples": 2, "progress": False}),
        cache=TuneCache(NS, persistent),
    )
    client = FakeClient(TIMES)
    results, caught = _warnings(lambda: [tuner.execute(tunables, client, n) for n in (1000, 5, 50000)])
    assert results == ["fast"] * 3
    assert tuner.stats.persistent_hits == 1 and tuner.stats.tunings == 2
    assert (
        persistent.state == "readonly"
        and len(caught) == 1
        and "read but not updated" in str(caught[0].message)
    )
    assert persistent.load(NS, "balanced|n=8") is None  # nothing was written


@pytest.mark.skipif(os.name != "posix" or os.geteuid() == 0, reason="root ignores directory permissions")
def test_a_read_only_directory_really_is_read_only(tmp_path: Path) -> None:
    folder = tmp_path / "ro"
    folder.mkdir()
    path = folder / "autotune.sqlite3"
    tunables = fake_set(list(TIMES))
    _tuner(path).execute(tunables, FakeClient(TIMES), 1000)
    folder.chmod(0o500)
    try:
        tuner = _tuner(path)
        results, caught = _warnings(
            lambda: [tuner.execute(tunables, FakeClient(TIMES), n) for n in (1000, 5)]
        )
        assert results == ["fast", "fast"] and len(caught) <= 1 and tuner.stats.persistent_hits == 1
    finally:
        folder.chmod(0o700)


def test_cache_off_in_config_writes_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.core.config import Config
    from cubeplug.core.tune import autotune

    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path))
    config = Config()
    config.autotune.cache = False
    config.autotune.bench = {"progress": False, "samples": 2}
    assert autotune(FakeClient(TIMES, config=config), fake_set(list(TIMES), name="test.nocache"), 7) == "fast"
    assert not any(tmp_path.iterdir())


def test_cache_dir_follows_the_environment(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from cubeplug.core.tune import cache_dir, default_db_path

    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path and default_db_path() == tmp_path / "autotune.sqlite3"
    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", "")
    import platformdirs

    assert cache_dir() == Path(platformdirs.user_cache_dir("cubeplug"))
