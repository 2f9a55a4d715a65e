"""``cubeplug cache info|clear``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from cubeplug import cli
from cubeplug.core.tune import CacheEntry, Namespace, PersistentCache, reset_persistent_caches


@pytest.fixture
def cache_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path))
    reset_persistent_caches()
    return tmp_path / "autotune.sqlite3"


def _fill(path: Path) -> None:
    cache = PersistentCache(path)
    for tuner in ("std.a", "std.b"):
        for key in ("balanced|n=1", "balanced|n=2"):
            cache.store(Namespace("0.1.0", "cpu:host", tuner), key, CacheEntry("fast", "sum"))
    cache.close()


def test_info_on_a_missing_cache(cache_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["cache", "info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["exists"] is False and report["directory from"] == "env CUBEPLUG_CACHE_DIR"
    assert cli.main(["--plain", "cache"]) == 0
    assert "autotune cache" in capsys.readouterr().out


def test_info_lists_namespaces_and_entries(cache_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(cache_path)
    assert cli.main(["cache", "info", "--json", "--entries"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["state"] == "ok" and [r["entries"] for r in report["namespaces"]] == [2, 2]
    assert {e["tuner"] for e in report["entries"]} == {"std.a", "std.b"}
    assert cli.main(["--plain", "cache", "info", "--entries"]) == 0
    out = capsys.readouterr().out
    assert "std.a" in out and "balanced|n=2" in out


def test_clear_by_tuner_then_all(cache_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    _fill(cache_path)
    assert cli.main(["cache", "clear", "--tuner", "std.a"]) == 0
    assert "deleted 2 autotune results of tuner 'std.a'" in capsys.readouterr().out
    assert cli.main(["cache", "clear"]) == 0
    assert "deleted 2 autotune results of every tuner" in capsys.readouterr().out
    assert PersistentCache(cache_path).summary() == []


def test_clear_deletes_a_corrupt_file(cache_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    cache_path.write_bytes(b"garbage" * 1000)
    assert cli.main(["cache", "info", "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["state"] == "off" and "corrupt" in report["problem"]
    assert cli.main(["cache", "clear", "--tuner", "x"]) == 0
    assert "with no filter" in capsys.readouterr().out and cache_path.exists()
    assert cli.main(["cache", "clear"]) == 0
    assert "deleted the unusable cache file" in capsys.readouterr().out and not cache_path.exists()
    assert cli.main(["cache", "clear"]) == 0
    assert "nothing to clear" in capsys.readouterr().out
