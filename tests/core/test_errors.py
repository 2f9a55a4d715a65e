"""The error hierarchy and the messages that tell users what to do."""

from __future__ import annotations

import cubeplug
from cubeplug.core import errors


def test_hierarchy() -> None:
    for cls in (
        errors.ConfigError,
        errors.PluginError,
        errors.BackendUnavailableError,
        errors.ValidationError,
        errors.CompileError,
        errors.OutOfMemoryError,
        errors.BufferTooBig,
        errors.LaunchError,
        errors.DeviceLostError,
    ):
        assert issubclass(cls, errors.CubeplugError)
        assert getattr(cubeplug, cls.__name__) is cls
    assert issubclass(errors.OutOfMemoryError, MemoryError)
    assert issubclass(errors.ValidationError, ValueError)


def test_out_of_memory_carries_its_figures() -> None:
    e = errors.OutOfMemoryError(100, in_use=50, reserved=80, limit=120, device_free=10, device_total=1000)
    assert (e.requested, e.in_use, e.reserved, e.limit) == (100, 50, 80, 120)
    text = str(e)
    for part in (
        "requested 100 B",
        "in use 50 B",
        "reserved 80 B",
        "limit 120 B",
        "10/1000",
        "memory_cleanup",
    ):
        assert part in text


def test_buffer_too_big() -> None:
    e = errors.BufferTooBig(10, 5)
    assert isinstance(e, errors.ValidationError)
    assert "10 B" in str(e) and "5 B" in str(e) and "split" in str(e)


def test_compile_error_dump_numbers_the_source() -> None:
    e = errors.CompileError(
        "boom",
        backend="opencl",
        kernel="k",
        source="a\nb\n",
        log="error at 2",
        options=("-O3",),
        line=2,
        col=1,
    )
    assert "line 2:1" in str(e)
    dump = e.dump()
    assert "   2 | b" in dump and "-O3" in dump and "error at 2" in dump


def test_plugin_error_names_dist_entry_point_cause_remedy() -> None:
    cause = ImportError("no module named foo")
    e = errors.PluginError(
        "plugin failed",
        dist="cubeplug-foo",
        version="1.0",
        entry_point="foo = foo.plugin",
        cause=cause,
        remedy="pip install foo",
    )
    text = str(e)
    for part in ("cubeplug-foo==1.0", "foo = foo.plugin", "ImportError", "pip install foo"):
        assert part in text


def test_config_error_names_source_and_allowed() -> None:
    e = errors.ConfigError(
        "bad value 'x' for [memory] limit", source="/p/cubeplug.toml", allowed="bytes or %"
    )
    assert "/p/cubeplug.toml" in str(e) and "bytes or %" in str(e)
