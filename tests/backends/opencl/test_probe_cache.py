"""The probe's outcomes on disk: a later process builds nothing; another host or driver probes again."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from cubeplug.backends.opencl import devices, probe_cache
from tests.backends.opencl.conftest import requires_opencl
from tests.backends.opencl.test_devices import FakePlatform


@pytest.fixture
def cache(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(devices, "_probed", {})
    monkeypatch.setattr(devices, "_shared", {})
    monkeypatch.setattr(devices, "_contexts", {})
    return tmp_path / probe_cache.FILE


def _no_builds(monkeypatch: pytest.MonkeyPatch) -> None:
    import pyopencl as cl

    def refuse(*args: Any) -> Any:
        raise AssertionError("the probe kernel was built again")

    monkeypatch.setattr(cl._cl, "_Program", refuse)


@requires_opencl
def test_a_later_process_reads_the_outcome_instead_of_building(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (dev, *_) = devices.list_devices()
    assert devices.compile_error(dev) is None
    assert cache.exists()
    devices._probed.clear()  # as a new process
    _no_builds(monkeypatch)
    assert devices.compile_error(dev) is None


def test_failures_are_kept_and_keys_tell_hosts_drivers_and_sources_apart(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    dev = FakePlatform("Portable Computing Language", "OpenCL 3.0 PoCL 3.0-rc2", "3.0-rc2").device
    dev.version = "OpenCL 3.0"
    assert probe_cache.lookup(dev, "src") == (False, None)
    probe_cache.store(dev, "src", "error: unknown target CPU 'generic'")
    assert probe_cache.lookup(dev, "src") == (True, "error: unknown target CPU 'generic'")
    assert probe_cache.lookup(dev, "other source") == (False, None)
    newer = FakePlatform("Portable Computing Language", "OpenCL 3.0 PoCL 3.1", "3.1").device
    newer.version = "OpenCL 3.0"
    assert probe_cache.lookup(newer, "src") == (False, None)
    monkeypatch.setattr(probe_cache, "host_fingerprint", lambda: "another processor")
    assert probe_cache.lookup(dev, "src") == (False, None)
    assert json.loads(cache.read_text())  # readable JSON, one entry


def test_an_unreadable_cache_is_ignored(cache: Path) -> None:
    dev = FakePlatform("P", "v", "1.0").device
    dev.version = "OpenCL 3.0"
    cache.parent.mkdir(parents=True, exist_ok=True)
    cache.write_text("{not json")
    assert probe_cache.lookup(dev, "src") == (False, None)
    probe_cache.store(dev, "src", None)  # replaces the broken file
    assert probe_cache.lookup(dev, "src") == (True, None)


def test_the_host_fingerprint_is_stable() -> None:
    assert probe_cache.host_fingerprint() == probe_cache.host_fingerprint()
    assert len(probe_cache.host_fingerprint()) == 16


@requires_opencl
def test_a_context_that_fails_to_open_is_not_kept_on_disk(
    cache: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import pyopencl as cl

    (dev, *_) = devices.list_devices()

    def no_context(device: Any) -> Any:
        raise cl.Error("clCreateContext failed: OUT_OF_HOST_MEMORY")

    monkeypatch.setattr(devices, "shared_context", no_context)
    error = devices.compile_error(dev)
    assert error is not None and "cannot open a context" in error and "OUT_OF_HOST_MEMORY" in error
    assert probe_cache.lookup(dev, devices.PROBE_SOURCE) == (False, None)
    monkeypatch.undo()
    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(cache.parent))
    monkeypatch.setattr(devices, "_probed", {})
    assert devices.compile_error(dev) is None  # passing: the next process probes again and it builds
