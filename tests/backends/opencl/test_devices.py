"""Which OpenCL devices are offered: the compile probe, devices that cannot compile, two installs of one
platform, numbering, and what doctor, list and the selector say about a device left out.

The broken device is a fake platform put in front of the real ones, so these tests run on every
machine; the probe itself is tested on the real device (a failing build through a bad probe source).
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

import cubeplug
from cubeplug import BackendUnavailableError
from cubeplug.backends.opencl import devices, plugin
from cubeplug.core.config import Config
from cubeplug.registry import selection
from tests.backends.opencl.conftest import requires_opencl

GENERIC = "error: unknown target CPU 'generic'"


class FakePlatform:
    """An OpenCL platform as ``devices`` reads one: a name, a version and its devices."""

    def __init__(self, name: str, version: str, driver: str, kind: int = 2, vendor_id: int = 0x1022) -> None:
        self.name, self.vendor, self.version = name, name, version
        self.int_ptr = id(self)
        self.device = FakeDevice(self, driver, kind, vendor_id)

    def get_devices(self, device_type: int = -1) -> list[Any]:
        if device_type not in (-1, 0xFFFFFFFF) and not device_type & self.device.type:
            import pyopencl as cl

            raise cl.Error("no device of that type")  # as PyOpenCL says DEVICE_NOT_FOUND
        return [self.device]


class FakeDevice:
    def __init__(self, platform: FakePlatform, driver: str, kind: int, vendor_id: int) -> None:
        self.platform, self.driver_version, self.type, self.vendor_id = platform, driver, kind, vendor_id
        self.name = f"pthread-fake-{driver}"
        self.int_ptr = id(self)


@pytest.fixture
def fresh_probes(monkeypatch: pytest.MonkeyPatch, tmp_path: Any) -> None:
    """Probe results (in memory and on disk) and contexts made anew for the test (the process's own
    put back after)."""
    monkeypatch.setenv("CUBEPLUG_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.setattr(devices, "_probed", {})
    monkeypatch.setattr(devices, "_shared", {})
    monkeypatch.setattr(devices, "_contexts", {})


def _with_platforms(
    monkeypatch: pytest.MonkeyPatch, before: list[FakePlatform], errors: dict[int, str]
) -> None:
    """Put fake platforms in front of the real ones; fake devices build as ``errors`` says (else fine)."""
    real_platforms = devices._platforms
    real_probe = devices.compile_error
    fakes = {id(p.device) for p in before}

    def platforms() -> list[Any]:
        return [*before, *real_platforms()]

    def compile_error(device: Any) -> str | None:
        if id(device) in fakes:
            return errors.get(id(device))
        return real_probe(device)

    monkeypatch.setattr(devices, "_platforms", platforms)
    monkeypatch.setattr(devices, "compile_error", compile_error)


@pytest.fixture
def broken_first(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakePlatform]:
    """A PoCL 3.0-rc2 that cannot compile, in front of the machine's platforms."""
    fake = FakePlatform("Portable Computing Language", "OpenCL 3.0 PoCL 3.0-rc2 fake", "3.0-rc2")
    _with_platforms(monkeypatch, [fake], {id(fake.device): GENERIC})
    selection.reset()
    yield fake
    selection.reset()


def test_driver_versions_are_ordered() -> None:
    key = devices.driver_key
    assert key("3.1+debian") > key("3.0") > key("3.0-rc2") > key("1.8")
    assert key("535.104.05") > key("525.60.13")
    assert key("6.0") > key("5.0-pre")
    assert key("unknown") < key("0.1")


@requires_opencl
def test_the_probe_builds_on_a_real_device_once(fresh_probes: None, monkeypatch: pytest.MonkeyPatch) -> None:
    (dev, *_) = devices.list_devices()
    assert devices.compile_error(dev) is None
    monkeypatch.setattr(devices, "PROBE_SOURCE", "this is not OpenCL C")
    assert devices.compile_error(dev) is None  # cached for the process: no second build


@requires_opencl
def test_a_failing_build_gives_the_compilers_message(
    fresh_probes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    (dev, *_) = devices.list_devices()
    monkeypatch.setattr(
        devices, "PROBE_SOURCE", "__kernel void cubeplug_probe(__global float* x) { x[0] = y; }"
    )
    error = devices.compile_error(dev)
    assert error is not None and "error" in error.lower() and "'y'" in error
    assert len(error) <= devices.MESSAGE_LIMIT
    assert int(dev.int_ptr) not in devices._shared  # the context of a device that cannot compile is let go
    (status, *_) = devices.survey()
    assert (status.error == error and not status.usable and devices.POCL_REMEDY in status.reason) or (
        "update or reinstall" in status.reason
    )


@requires_opencl
def test_devices_across_platforms_and_filters() -> None:
    everything = devices.list_devices()
    assert everything
    first = everything[0]
    needle = str(first.platform.vendor).split()[-1]
    assert first in devices.list_devices(platform=needle.upper())
    assert devices.list_devices(platform="no-such-platform-xyz") == []
    kind = devices._device_type_name(int(first.type))
    if kind in ("gpu", "cpu", "accelerator"):
        assert first in devices.list_devices(device_type=kind)
    assert set(devices.usable_devices()) <= set(everything)


@requires_opencl
def test_device_context_is_shared_and_bad_indices_fail() -> None:
    a = devices.device_context(0, Config())
    assert devices.device_context(0, Config()) is a
    assert a.context is devices.shared_context(a.device)  # the probe's context is the clients' context
    count = len(devices.usable_devices())
    with pytest.raises(BackendUnavailableError, match=f"opencl:{count} does not exist"):
        devices.device_context(count, Config())
    with pytest.raises(BackendUnavailableError, match="no-such"):
        devices.device_context(0, _config(platform="no-such"))
    with pytest.raises(BackendUnavailableError):
        devices.device_context(-1, Config())


def _config(**opts: object) -> Config:
    config = Config()
    config.backends["opencl"] = dict(opts)
    return config


@requires_opencl
def test_a_device_that_cannot_compile_is_left_out(broken_first: FakePlatform) -> None:
    statuses = devices.survey()
    assert statuses[0].device is broken_first.device and statuses[0].error == GENERIC
    assert broken_first.device not in devices.usable_devices()
    # opencl:0 is the first device that compiles, not the broken one in front of it
    ctx = devices.device_context(0, Config())
    assert ctx.device == devices.usable_devices()[0] and ctx.device is not broken_first.device
    c = cubeplug.client("opencl")
    assert c.device.name == ctx.name
    h = c.create(b"compiles")
    assert bytes(c.read_one(h)) == b"compiles"


@requires_opencl
def test_asking_for_the_broken_device_by_name_says_why(broken_first: FakePlatform) -> None:
    with pytest.raises(BackendUnavailableError) as info:
        cubeplug.client("opencl:3.0-rc2 fake:0")
    message = str(info.value)
    assert GENERIC in message and "pocl-opencl-icd" in message and "PoCL >= 3.1" in message
    assert "pthread-fake-3.0-rc2" in message
    with pytest.raises(BackendUnavailableError, match="unknown target CPU"):
        devices.device_context(0, _config(platform="3.0-rc2 fake"))


@requires_opencl
def test_probe_list_and_doctor_show_the_device_left_out(
    broken_first: FakePlatform, capsys: pytest.CaptureFixture[str]
) -> None:
    from cubeplug import cli

    result = plugin.probe()
    assert result.ok and "left out" in result.reason and GENERIC in result.reason
    assert all("fake" not in d for d in result.devices)
    (left_out,) = [r for r in result.details["left out"] if "fake" in r]
    assert left_out.startswith("pthread-fake-3.0-rc2 [Portable Computing Language 3.0-rc2]")
    assert devices.POCL_REMEDY in left_out

    assert cli.main(["list", "--probe", "--json"]) == 0
    rows = {r["name"]: r for r in json.loads(capsys.readouterr().out)}
    assert rows["opencl"]["status"] == "ok" and GENERIC in rows["opencl"]["reason"]

    report = cli.backend_report("opencl")  # what `cubeplug doctor` runs per backend
    assert report["status"] == "ok"
    rows = report["diagnostics"]["opencl devices"]
    assert rows[0].startswith("opencl:0 = ")
    (fake,) = [r for r in rows if "pthread-fake-3.0-rc2" in r]
    assert fake.startswith("left out: pthread-fake-3.0-rc2") and GENERIC in fake


def test_a_machine_whose_only_device_cannot_compile(monkeypatch: pytest.MonkeyPatch) -> None:
    pytest.importorskip("pyopencl")
    fake = FakePlatform("Portable Computing Language", "OpenCL 3.0 PoCL 3.0-rc2", "3.0-rc2")
    monkeypatch.setattr(devices, "_platforms", lambda: [fake])
    monkeypatch.setattr(devices, "compile_error", lambda dev: GENERIC)
    result = plugin.probe()
    assert not result.ok
    assert result.reason.startswith("no OpenCL device can compile") and "pocl-opencl-icd" in result.reason
    monkeypatch.setenv("CUBEPLUG_BACKEND_ORDER", "opencl,cpu")
    selection.reset()
    try:
        chosen = selection.select()
        assert chosen.backend != "opencl"
        assert any(name == "opencl" and GENERIC in reason for name, reason in chosen.skipped)
        with pytest.raises(BackendUnavailableError, match="unknown target CPU"):
            cubeplug.client("opencl")
    finally:
        selection.reset()


@requires_opencl
def test_two_installs_of_one_platform_the_newest_working_driver_wins(
    fresh_probes: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    real = devices.list_devices()[0]
    name, kind, vendor = str(real.platform.name), int(real.type), int(real.vendor_id)
    older = FakePlatform(name, "old", "1.0", kind, vendor)
    newer_broken = FakePlatform(name, "new broken", "99.0", kind, vendor)
    _with_platforms(monkeypatch, [older, newer_broken], {id(newer_broken.device): GENERIC})
    statuses = {int(s.device.int_ptr): s for s in devices.survey()}
    chosen = statuses[int(real.int_ptr)]
    assert chosen.usable, chosen.reason
    assert statuses[newer_broken.device.int_ptr].error == GENERIC
    shadowed = statuses[older.device.int_ptr]
    assert not shadowed.usable and shadowed.shadowed_by == chosen.label
    assert "whose driver is newer" in shadowed.reason
    assert devices.usable_devices().count(real) == 1 and older.device not in devices.usable_devices()
    rows = plugin.cubeplug_diagnostics(backend="opencl")["opencl devices"]
    assert any(r.startswith("left out: pthread-fake-1.0") and "driver is newer" in r for r in rows)


def test_newest_working_duplicate_is_kept_and_other_kinds_are_not_duplicates(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pytest.importorskip("pyopencl")
    old = FakePlatform("PoCL", "a", "3.0-rc2")
    new = FakePlatform("PoCL", "b", "3.1+debian")
    gpu = FakePlatform("PoCL", "c", "3.0-rc2", kind=4)
    other = FakePlatform("Other", "d", "1.0")
    monkeypatch.setattr(devices, "_platforms", lambda: [old, new, gpu, other])
    monkeypatch.setattr(devices, "compile_error", lambda dev: None)
    statuses = devices.survey()
    assert [s.usable for s in statuses] == [False, True, True, True]
    assert statuses[0].shadowed_by == statuses[1].label
    assert [d.platform for d in devices.usable_devices()] == [gpu, new, other]  # GPUs first
    assert [d.platform for d in devices.usable_devices(device_type="gpu")] == [gpu]


@pytest.mark.parametrize(
    ("kinds", "software"), [((2,), True), ((4, 2), False), ((2, 4), False), ((8,), False)]
)
def test_gpus_are_numbered_first_and_the_probe_says_whether_opencl_0_is_a_cpu(
    monkeypatch: pytest.MonkeyPatch, kinds: tuple[int, ...], software: bool
) -> None:
    pytest.importorskip("pyopencl")
    fakes = [FakePlatform(f"Platform {i}", "v", "1.0", kind=k) for i, k in enumerate(kinds)]
    monkeypatch.setattr(devices, "_platforms", lambda: fakes)
    monkeypatch.setattr(devices, "compile_error", lambda dev: None)
    result = plugin.probe()
    assert result.ok and result.software is software
    first = devices.usable_devices()[0]
    assert (first.type == 2) is software and [d.platform for d in devices.usable_devices()] == sorted(
        fakes, key=lambda p: p.device.type == 2
    )
