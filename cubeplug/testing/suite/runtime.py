"""The rest of the client: identity and declared capabilities, profiling, the compile cache, to_client,
close."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.core.backend import Capabilities, DeviceInfo
from cubeplug.core.errors import ValidationError
from cubeplug.core.kernel import DTYPES
from cubeplug.core.profile import ProfileDuration
from cubeplug.testing import gates, kernels

N = 1 << 16


class TestIdentity:
    """A client says what it is and declares consistent capabilities."""

    def test_identity(self, cubeplug_client: Any, cubeplug_backend: Any) -> None:
        assert isinstance(cubeplug_client.backend, str) and cubeplug_client.backend
        if cubeplug_backend.name != "auto":
            assert cubeplug_client.backend == cubeplug_backend.name
        assert isinstance(cubeplug_client.device, DeviceInfo)
        assert cubeplug_client.device.backend == cubeplug_client.backend
        assert isinstance(cubeplug_client.properties, dict)
        assert cubeplug_client.backend in repr(cubeplug_client)
        assert cubeplug_client.server.dialects, "a backend compiles at least one kernel dialect"

    def test_capabilities_are_consistent(self, cubeplug_client: Any) -> None:
        caps = cubeplug_client.capabilities
        assert isinstance(caps, Capabilities)
        assert caps.dtypes <= set(DTYPES), f"unknown dtypes {sorted(caps.dtypes - set(DTYPES))}"
        assert {"f32", "i32", "u32"} <= caps.dtypes, "every backend supports f32, i32 and u32"
        assert caps.fp16 == ("f16" in caps.dtypes)
        assert caps.fp64 == ("f64" in caps.dtypes)
        assert caps.int64 == ("i64" in caps.dtypes) == ("u64" in caps.dtypes)
        align = caps.offset_alignment
        assert align >= 1 and align & (align - 1) == 0, f"offset_alignment {align} is a power of two"
        assert caps.max_alloc_bytes >= 0 and caps.max_cube_threads >= 1
        assert len(caps.max_cube_dim) == 3 and min(caps.max_cube_dim) >= 1


class TestProfiling:
    """``client.profile`` returns the function's result and a positive duration."""

    def test_profile(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.ADD_ONE)
        h = cubeplug_client.create(np.zeros(N, np.int32))

        def work() -> str:
            for _ in range(20):
                cubeplug_client.launch(k, kernels.cubes(N), [h], [N])
            return "done"

        result, duration = cubeplug_client.profile(work)
        assert result == "done"
        assert isinstance(duration, ProfileDuration) and duration.method in ("device", "system")
        assert duration.seconds() > 0
        assert (cubeplug_client.to_numpy(h, "i32") == 20).all()

    def test_nested_profiles(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.ADD_ONE)
        h = cubeplug_client.create(np.zeros(N, np.int32))

        def inner() -> float:
            _, d = cubeplug_client.profile(lambda: cubeplug_client.launch(k, kernels.cubes(N), [h], [N]))
            return float(d.seconds())

        inner_seconds, outer = cubeplug_client.profile(inner)
        assert inner_seconds > 0 and outer.seconds() > 0

    def test_device_timing(self, cubeplug_client: Any) -> None:
        gates.require(cubeplug_client, "device_timing")
        k = gates.kernel(cubeplug_client, kernels.ADD_ONE)
        h = cubeplug_client.create(np.zeros(N, np.int32))
        _, duration = cubeplug_client.profile(lambda: cubeplug_client.launch(k, kernels.cubes(N), [h], [N]))
        assert duration.method == "device" and duration.seconds() > 0


class TestCompileCache:
    """A kernel compiles once per device; an identical definition hits the cache."""

    def test_second_compile_hits_the_cache(self, cubeplug_client: Any) -> None:
        first, second = kernels.cache_probe_pair()
        gates.kernel(cubeplug_client, first)
        cache = cubeplug_client.server.compile_cache
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        misses, hits = cache.misses, cache.hits
        cubeplug_client.launch(first, 1, [h], [1, 64])
        assert (cache.misses, cache.hits) == (misses + 1, hits), "the first compile is a miss"
        for _ in range(3):
            cubeplug_client.launch(first, 1, [h], [2, 64])
        assert cache.misses == misses + 1, "launching a compiled kernel again does not compile"
        cubeplug_client.launch(second, 1, [h], [3, 64])
        assert (cache.misses, cache.hits) == (misses + 1, hits + 1), "an identical kernel hits the cache"
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "u32"), 3 + np.arange(64))


class TestToClient:
    """``to_client`` copies a handle to another client (another backend, or the same one) and back."""

    def test_to_cpu_and_back(self, cubeplug_client: Any, cubeplug_cpu_client: Any) -> None:
        data = np.random.default_rng(3).integers(0, 2**31, 10_001, dtype=np.int64)
        h = cubeplug_client.create(data)
        on_cpu = cubeplug_client.to_client(h, cubeplug_cpu_client)
        assert on_cpu.client is not h.client
        np.testing.assert_array_equal(cubeplug_cpu_client.to_numpy(on_cpu, "i64"), data)
        back = cubeplug_cpu_client.to_client(on_cpu, cubeplug_client)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(back, "i64"), data)
        with pytest.raises(ValidationError):
            cubeplug_client.read_one(on_cpu)

    def test_views_and_empty(self, cubeplug_client: Any, cubeplug_cpu_client: Any) -> None:
        data = np.arange(1000, dtype=np.uint8)
        h = cubeplug_client.create(data)
        view = h.offset_start(100).offset_end(50)
        on_cpu = cubeplug_client.to_client(view, cubeplug_cpu_client)
        assert bytes(cubeplug_cpu_client.read_one(on_cpu)) == data[100:-50].tobytes()
        empty = cubeplug_client.to_client(cubeplug_client.empty(0), cubeplug_cpu_client)
        assert empty.size == 0

    def test_to_the_same_client(self, cubeplug_client: Any) -> None:
        data = np.arange(5000, dtype=np.int32)
        h = cubeplug_client.create(data)
        copy = cubeplug_client.to_client(h.offset_start(400), cubeplug_client)
        k = gates.kernel(cubeplug_client, kernels.ADD_ONE)
        cubeplug_client.launch(k, kernels.cubes(5000), [h], [5000])  # the copy is independent
        np.testing.assert_array_equal(cubeplug_client.to_numpy(copy, "i32"), data[100:])
        with pytest.raises(ValidationError):
            cubeplug_client.to_client(h, object())


class TestClose:
    """A closed client refuses every call with ValidationError, and never reaches its released device."""

    def test_every_call_of_a_closed_client_raises(
        self, cubeplug_new_client: Any, cubeplug_cpu_client: Any
    ) -> None:
        client = cubeplug_new_client()
        data = np.arange(64, dtype=np.uint32)
        h = client.create(data)
        for _ in range(3):  # the sizes' exact-reuse entries exist: the lock-free path is armed
            client.empty(256)
        k = gates.kernel(client, kernels.ADD_ONE) if gates.compiles_suite_dialect(client) else None
        if k is not None:
            client.launch(k, 1, [h], [64])
            client.launch_unchecked(k, 1, [h], [64])
        backend, device = client.backend, client.device
        tensor = client.create_tensor(np.zeros((4, 4), np.float32))
        other = cubeplug_cpu_client.create(data)
        client.close()
        assert client.closed
        client.close()  # closing twice is harmless
        calls = {
            "empty": lambda: client.empty(256),
            "empty (new size)": lambda: client.empty(1000),
            "create": lambda: client.create(data),
            "empty_tensor": lambda: client.empty_tensor((4,), "f32"),
            "create_tensor": lambda: client.create_tensor(data),
            "memory_usage": client.memory_usage,
            "memory_report": client.memory_report,
            "memory_cleanup": client.memory_cleanup,
            "persistent_memory": lambda: client.persistent_memory().__enter__(),
            "reserve_staging": lambda: client.reserve_staging([64]),
            "read": lambda: client.read([h]),
            "read_async": lambda: client.read_async([h]),
            "to_numpy": lambda: client.to_numpy(h, "u32"),
            "read_tensor": lambda: client.read_tensor(tensor),
            "as_native": lambda: client.as_native(h, "u32"),
            "flush": client.flush,
            "sync": client.sync,
            "sync all streams": lambda: client.sync(all_streams=True),
            "profile": lambda: client.profile(lambda: None),
            "to_client from it": lambda: client.to_client(h, cubeplug_cpu_client),
            "to_client into it": lambda: cubeplug_cpu_client.to_client(other, client),
        }
        if k is not None:
            calls["launch"] = lambda: client.launch(k, 1, [h], [64])
            calls["launch_unchecked"] = lambda: client.launch_unchecked(k, 1, [h], [64])
        for name, call in calls.items():
            with pytest.raises(ValidationError, match="was closed") as info:
                call()
            assert "cubeplug.client" in str(info.value), f"{name}: the message says what to do"
        assert (client.backend, client.device) == (backend, device)  # its identity stays readable
        assert backend in repr(client) or str(device) in repr(client)
        np.testing.assert_array_equal(cubeplug_cpu_client.to_numpy(other, "u32"), data)  # others unharmed

