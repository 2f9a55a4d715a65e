"""The backend toolkit (:mod:`cubeplug.plugin`): the surface every backend imports, and its shared pieces.

The built-in backends import cubeplug only through ``cubeplug.plugin`` (import-linter's
``backends-are-plugins`` contract, pyproject.toml); the plugin template, which import-linter does not
see, is held to the same rule here.
"""

from __future__ import annotations

import ast
import functools
import gc
import threading
from pathlib import Path
from typing import Any

import pytest

import cubeplug.plugin as toolkit
from cubeplug.plugin import (
    DTYPES,
    Completer,
    ConfigError,
    DeviceInfo,
    EventFuture,
    MemoryProperties,
    StagingPool,
    ValidationError,
    call_when_done,
    check_option_keys,
    device_setup,
    size_class,
    staging_sizes,
)

ROOT = Path(__file__).resolve().parents[2]
TEMPLATE = ROOT / "plugins" / "cubeplug-backend-template" / "cubeplug_template"

#: What cubeplug.plugin exported before it became the toolkit: every name stays.
FIRST_NAMES = {
    "API_VERSION", "BackendSpec", "BackendUnavailableError", "Buffer", "BufferTooBig", "Capabilities",
    "CompileError", "Compiled", "ComputeServer", "ComputeStorage", "ConfigError", "CubeCount",
    "CubeplugError", "DeviceInfo", "DeviceLostError", "EventStreamBackend", "ExecutionMode", "Handle",
    "Kernel", "LaunchError", "MemoryProperties", "MultiStream", "OutOfMemoryError", "PluginError",
    "Probe", "Scalar", "Scheduler", "StorageHandle", "ValidationError", "hookimpl", "next_storage_id",
}  # fmt: skip


def _cubeplug_imports(path: Path) -> list[str]:
    """The cubeplug modules a source file imports (at any depth)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.append(node.module)
        elif isinstance(node, ast.Import):
            found += [alias.name for alias in node.names]
    return [m for m in found if m == "cubeplug" or m.startswith("cubeplug.")]


def test_every_name_is_exported_and_public() -> None:
    assert set(toolkit.__all__) >= FIRST_NAMES
    assert len(set(toolkit.__all__)) == len(toolkit.__all__)
    for name in toolkit.__all__:
        assert not name.startswith("_") and getattr(toolkit, name) is not None, name


def test_the_template_imports_cubeplug_only_through_the_toolkit() -> None:
    files = sorted(TEMPLATE.glob("*.py"))
    assert files
    outside = {f.name: m for f in files for m in _cubeplug_imports(f) if not m.startswith("cubeplug.plugin")}
    assert outside == {}


# ---------------------------------------------------------------------- staging pool
class Block:
    def __init__(self, size: int) -> None:
        self.size = size


def test_size_classes_are_powers_of_two_from_the_minimum() -> None:
    assert size_class(0) == size_class(1) == size_class(4096) == 4096
    assert size_class(4097) == 8192 and size_class(1 << 20) == 1 << 20
    assert size_class(1, 256) == 256 and size_class(300, 256) == 512
    assert StagingPool(256).size_class(300) == 512


def test_idle_blocks_are_reused_newest_first_and_within_the_limits() -> None:
    pool: StagingPool[Block] = StagingPool(keep=3 * 4096, keep_per_class=2, largest_kept=8192)
    a, b, c = Block(4096), Block(4096), Block(4096)
    assert pool.reuse(4096) is None
    assert pool.keep_idle(a, 4096) and pool.keep_idle(b, 4096)
    assert not pool.keep_idle(c, 4096)  # two per class
    assert not pool.keep_idle(Block(16384), 16384)  # above the largest class kept
    assert pool.keep_idle(Block(8192), 8192) is False  # 4 pages would pass the byte limit
    assert pool.idle_bytes() == 8192
    assert pool.reuse(4096) is b and pool.reuse(4096) is a and pool.reuse(4096) is None
    assert pool.idle_bytes() == 0


def test_oldest_first_and_drain() -> None:
    class Fifo(StagingPool[Block]):
        oldest_first = True

    pool = Fifo()
    a, b = Block(4096), Block(4096)
    pool.keep_idle(a, 4096)
    pool.keep_idle(b, 4096)
    assert pool.reuse(4096) is a
    assert pool.drain() == [b] and pool.idle_bytes() == 0 and pool.reuse(4096) is None


def test_registered_ranges() -> None:
    pool: StagingPool[Block] = StagingPool()
    assert pool.owner_of(100, 1) is None
    pool.register(1000, 2000, "a")
    pool.register(3000, 3100, "b")
    assert pool.owner_of(1000, 1000) == "a" and pool.owner_of(1500, 10) == "a"
    assert pool.owner_of(1990, 20) is None and pool.owner_of(999, 1) is None
    assert pool.owner_of(3050, 50) == "b" and sorted(pool.owners()) == ["a", "b"]
    assert not pool.unregister(1000, "someone else") and pool.unregister(1000, "a")
    assert pool.owner_of(1500, 10) is None and not pool.unregister(1000)


def test_staging_sizes_are_checked_before_any_is_used() -> None:
    assert staging_sizes([0, 3, 4096]) == [0, 3, 4096]
    for bad in ([1, -1], [True], [1.5], ["8"]):
        with pytest.raises(ValidationError, match="non-negative byte counts"):
            staging_sizes(bad)


# ---------------------------------------------------------------------- completer and futures
class Event:
    def __init__(self) -> None:
        self.fired = threading.Event()
        self.waited = 0

    def synchronize(self) -> None:
        self.waited += 1
        assert self.fired.wait(10)


def test_the_completer_resolves_futures_in_order_and_survives_failing_tasks() -> None:
    completer = Completer("cubeplug-test-completer")
    assert completer.thread.name == "cubeplug-test-completer"
    order: list[int] = []
    event = Event()

    def finish(k: int) -> Any:
        order.append(k)
        return k

    futures = [EventFuture(event, lambda k=k: finish(k), Event.synchronize) for k in range(3)]
    completer.submit(failing_task())
    for future in futures:
        completer.submit(future)
    event.fired.set()
    assert [f.result(timeout=10) for f in futures] == [0, 1, 2]
    completer.close()
    assert order == [0, 1, 2] and not completer.thread.is_alive()


def failing_task() -> Any:
    class Failing:
        def resolve(self) -> None:
            raise RuntimeError("a task's own failure")

    return Failing()


def test_call_when_done_reports_the_wait_error_to_the_callback() -> None:
    seen: list[Any] = []

    def wait(event: Any) -> None:
        if event == "bad":
            raise ValueError("the work failed")

    completer = Completer("cubeplug-test-waiter", functools.partial(call_when_done, wait))

    done = threading.Event()
    completer.submit("ok", seen.append)
    completer.submit("bad", lambda e: seen.append(type(e).__name__))
    completer.submit("ok", lambda e: done.set())
    assert done.wait(10)
    completer.close()
    assert seen == [None, "ValueError"]
    del completer
    gc.collect()


# ---------------------------------------------------------------------- device setup and options
def test_device_setup_derives_the_flags_and_the_common_properties() -> None:
    memory = MemoryProperties(1 << 20, 256, 8 << 20)
    setup = device_setup(
        DeviceInfo("x", 0, "dev"), memory, dtypes={"f32", "i64"}, offset_alignment=16, properties={"k": 1}
    )
    caps = setup.capabilities
    assert caps.dtypes == frozenset({"f32", "i64"}) and caps.int64 and not caps.fp16 and not caps.fp64
    assert caps.max_alloc_bytes == 1 << 20 and caps.offset_alignment == 16
    assert setup.properties == {
        "name": "dev", "max_page_size": 1 << 20, "alignment": 256, "total_memory": 8 << 20, "k": 1,
    }  # fmt: skip
    args = setup.server_args()
    assert set(args) == {"info", "memory_properties", "capabilities", "properties"}
    everything = device_setup(DeviceInfo("x", 0, "dev"), MemoryProperties(64, 4, None), dtypes=DTYPES)
    assert everything.capabilities.fp16 and everything.capabilities.fp64
    assert "total_memory" not in everything.properties


def test_unknown_option_keys_are_config_errors() -> None:
    check_option_keys("x", {"a": 1}, ("a", "b"))
    with pytest.raises(ConfigError, match=r"unknown key 'c' in \[backends.x\]") as info:
        check_option_keys("x", ["a", "c"], ("a", "b"))
    assert info.value.key == "c" and info.value.allowed == "a, b" and "unknown option" in str(info.value)
