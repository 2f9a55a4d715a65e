"""The kernel ABI: every param kind and declared dtype in declared order, cube counts, checked mode."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.core.kernel import DTYPES, CubeCount
from cubeplug.testing import gates, kernels

N = 1000
#: Elements allocated for ``N`` used: the tail must be left alone by a guarded kernel.
ALLOC = 1024


def _sentinel(dtype: str) -> np.ndarray:
    return np.ones(ALLOC, dtype=DTYPES[dtype])


class TestLaunch:
    """Params keep their declared order and dtype; buffers of every kind bind the right bytes."""

    @pytest.mark.parametrize("dtype", list(DTYPES))
    def test_every_declared_dtype(self, cubeplug_client: Any, dtype: str) -> None:
        gates.require_dtype(cubeplug_client, dtype)
        k = gates.kernel(cubeplug_client, kernels.typed_add(dtype))
        x = kernels.sample(dtype, ALLOC)
        a = True if dtype == "bool" else 3
        hx, hy = cubeplug_client.create(x), cubeplug_client.create(_sentinel(dtype))
        cubeplug_client.launch(k, kernels.cubes(N), [hx, hy], [a, N])
        expected = _sentinel(dtype)
        expected[:N] = (x[:N] != a) if dtype == "bool" else x[:N] + DTYPES[dtype].type(a)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(hy, dtype), expected)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(hx, dtype), x)  # read-only: untouched

    @pytest.mark.parametrize("dtype", list(DTYPES))
    def test_scalar_passed_by_value_exactly(self, cubeplug_client: Any, dtype: str) -> None:
        gates.require_dtype(cubeplug_client, dtype)
        k = gates.kernel(cubeplug_client, kernels.typed_add(dtype))
        dt = DTYPES[dtype]
        value = dt.type(kernels.WIDE_VALUES[dtype])
        hx, hy = cubeplug_client.create(np.zeros(8, dt)), cubeplug_client.create(np.zeros(8, dt))
        cubeplug_client.launch(k, 1, [hx, hy], [value, 8])
        np.testing.assert_array_equal(cubeplug_client.to_numpy(hy, dtype), np.full(8, value, dt))

    def test_every_declared_dtype_interleaved_in_one_launch(self, cubeplug_client: Any) -> None:
        dialect = gates.suite_dialect(cubeplug_client)
        declared = [d for d in DTYPES if d in cubeplug_client.capabilities.dtypes]
        expressible = [d for d in declared if dialect != "wgsl" or d in kernels.WGSL_TYPES]
        assert expressible == declared, f"the backend declares dtypes {dialect} cannot express"
        for start in range(0, len(declared), 3):  # 3 buffers + the scalars: within WebGPU's 8 bindings
            group = tuple(declared[start : start + 3])
            k = gates.kernel(cubeplug_client, kernels.echo(group))
            outs = [cubeplug_client.create(np.zeros(4, DTYPES[d])) for d in group]
            values = [kernels.WIDE_VALUES[d] for d in group]
            cubeplug_client.launch(k, 1, outs, values)
            for d, h, v in zip(group, outs, values):
                got = cubeplug_client.to_numpy(h, d)
                assert got[0] == DTYPES[d].type(v), f"{d} scalar of {group}: got {got[0]!r}, want {v!r}"
                assert not got[1:].any(), f"{d} buffer of {group} written past element 0"

    def test_f16_used_only_inside_the_source(self, cubeplug_client: Any) -> None:
        # A kernel of f32 arrays computing in an f16 local, declared with Kernel(dtypes=("f16",)):
        # the backend enables f16 for it as for an f16 parameter.
        gates.require_dtype(cubeplug_client, "f16")
        k = gates.kernel(cubeplug_client, kernels.HALF_INSIDE)
        x = np.linspace(0.0, 60.0, ALLOC, dtype=np.float32) + np.float32(1.0 / 3.0)  # few are f16 values
        hx = cubeplug_client.create(x)
        for launch in (cubeplug_client.launch, cubeplug_client.launch_unchecked):
            hy = cubeplug_client.create(_sentinel("f32"))
            launch(k, kernels.cubes(N), [hx, hy], [N])
            got = cubeplug_client.to_numpy(hy, "f32")
            np.testing.assert_array_equal(got[N:], 1.0)  # the tail is left alone
            # Rounded to f16 (to a neighbour of numpy's nearest value: WGSL lets a conversion pick
            # either), then doubled exactly.
            np.testing.assert_array_equal(got[:N], got[:N].astype(np.float16).astype(np.float32))
            want = (x[:N].astype(np.float16) * 2).astype(np.float32)
            np.testing.assert_allclose(got[:N], want, rtol=2.0**-10)

    @pytest.mark.parametrize("width", [2, 4])
    def test_vector_buffers(self, cubeplug_client: Any, width: int) -> None:
        k = gates.kernel(cubeplug_client, kernels.vec_scale(width))
        n = 300
        v = np.arange((n + 4) * width, dtype=np.float32).reshape(n + 4, width)
        h = cubeplug_client.create(v)
        cubeplug_client.launch(k, kernels.cubes(n), [h], [2.0, n])
        expected = v.copy()
        expected[:n] = v[:n] * 2 + np.arange(width)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "f32", (n + 4, width)), expected)

    def test_vector_buffer_on_a_view(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.vec_scale(4))
        off = max(int(cubeplug_client.capabilities.offset_alignment), 16)
        v = np.zeros((off // 16 + 8, 4), np.float32)
        h = cubeplug_client.create(v)
        cubeplug_client.launch(k, 1, [h.offset_start(off)], [1.0, 8])
        expected = v.copy()
        expected[off // 16 :] = np.arange(4)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "f32", v.shape), expected)

    @pytest.mark.parametrize("dtype", ["u32", "i32"])
    def test_atomic_buffers(self, cubeplug_client: Any, dtype: str) -> None:
        gates.require(cubeplug_client, "atomics")
        k = gates.kernel(cubeplug_client, kernels.atomic_count(dtype))
        n = 5000
        x = np.where(np.arange(n) % 3 == 0, 1, -1).astype(np.int32)
        hits = cubeplug_client.create(np.array([7, 0], DTYPES[dtype]))
        cubeplug_client.launch(k, kernels.cubes(n), [cubeplug_client.create(x), hits], [n])
        np.testing.assert_array_equal(cubeplug_client.to_numpy(hits, dtype), [7 + np.count_nonzero(x > 0), 0])

    def test_entry_point_and_defines(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.ENTRY_DEFINES)
        h = cubeplug_client.create(np.zeros(2, np.int32))
        cubeplug_client.launch(k, 1, [h], [])
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "i32"), [21, 8])

    def test_unchecked_matches_checked(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.typed_add("f32"))
        x = np.linspace(0, 1, ALLOC, dtype=np.float32)
        hx = cubeplug_client.create(x)
        checked, unchecked = (
            cubeplug_client.create(_sentinel("f32")),
            cubeplug_client.create(_sentinel("f32")),
        )
        cubeplug_client.launch(k, kernels.cubes(N), [hx, checked], [0.5, N])
        cubeplug_client.launch_unchecked(k, kernels.cubes(N), [hx, unchecked], [0.5, N])
        a, b = cubeplug_client.read([checked, unchecked])
        assert bytes(a) == bytes(b)
        np.testing.assert_array_equal(np.frombuffer(a, np.float32)[:N], x[:N] + np.float32(0.5))

    def test_count_forms(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.FILL)
        for i, count in enumerate((2, (2,), (2, 1), (2, 1, 1), CubeCount(2))):
            h = cubeplug_client.create(np.zeros(2 * kernels.CUBE + 1, np.uint32))
            cubeplug_client.launch(k, count, [h], [i, 10**6])
            got = cubeplug_client.to_numpy(h, "u32")
            np.testing.assert_array_equal(
                got[:-1], i + np.arange(2 * kernels.CUBE), err_msg=f"count {count!r}"
            )
            assert got[-1] == 0, f"count {count!r} ran more than 2 cubes"


class TestCubeCount:
    """Static 3-D counts, zero counts (a no-op) and counts read from device memory."""

    @pytest.mark.parametrize("count", [(1, 1, 1), (3, 1, 1), (3, 2, 1), (3, 2, 2), (1, 3, 5)], ids=str)
    def test_static(self, cubeplug_client: Any, count: tuple[int, int, int]) -> None:
        k = gates.kernel(cubeplug_client, kernels.GEOMETRY)
        expected = kernels.geometry_expected(count)
        h = cubeplug_client.create(np.zeros(expected.size + 8, np.uint32))
        cubeplug_client.launch(k, CubeCount(*count), [h], [])
        got = cubeplug_client.to_numpy(h, "u32")
        np.testing.assert_array_equal(got[: expected.size], expected)
        assert not got[expected.size :].any()

    @pytest.mark.parametrize("count", [(0, 1, 1), (1, 0, 1), (4, 2, 0), (0, 0, 0)], ids=str)
    def test_zero_is_a_noop(self, cubeplug_client: Any, count: tuple[int, int, int]) -> None:
        k = gates.kernel(cubeplug_client, kernels.FILL)
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        cubeplug_client.launch(k, CubeCount(*count), [h], [5, 64])
        cubeplug_client.launch_unchecked(k, CubeCount(*count), [h], [5, 64])
        cubeplug_client.launch(k, 0, [h], [5, 64])
        assert not cubeplug_client.to_numpy(h, "u32").any()

    @pytest.mark.parametrize("count", [(3, 2, 2), (2, 1, 1)], ids=str)
    def test_dynamic(self, cubeplug_client: Any, count: tuple[int, int, int]) -> None:
        gates.require(cubeplug_client, "dynamic_count")
        k = gates.kernel(cubeplug_client, kernels.GEOMETRY)
        expected = kernels.geometry_expected(count)
        h = cubeplug_client.create(np.zeros(expected.size + 8, np.uint32))
        counts = cubeplug_client.create(np.array(count, np.uint32))
        cubeplug_client.launch(k, CubeCount.dynamic(counts), [h], [])
        got = cubeplug_client.to_numpy(h, "u32")
        np.testing.assert_array_equal(got[: expected.size], expected)
        assert not got[expected.size :].any()

    def test_dynamic_written_by_a_kernel(self, cubeplug_client: Any) -> None:
        gates.require(cubeplug_client, "dynamic_count")
        fill = gates.kernel(cubeplug_client, kernels.FILL)
        geometry = gates.kernel(cubeplug_client, kernels.GEOMETRY)
        counts = cubeplug_client.create(np.zeros(3, np.uint32))
        cubeplug_client.launch(fill, 1, [counts], [2, 3])  # (2, 3, 4), written on the device
        expected = kernels.geometry_expected((2, 3, 4))
        h = cubeplug_client.create(np.zeros(expected.size, np.uint32))
        cubeplug_client.launch(geometry, CubeCount.dynamic(counts), [h], [])
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "u32"), expected)

    def test_dynamic_zero_is_a_noop(self, cubeplug_client: Any) -> None:
        gates.require(cubeplug_client, "dynamic_count")
        k = gates.kernel(cubeplug_client, kernels.GEOMETRY)
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        counts = cubeplug_client.create(np.array([2, 0, 1], np.uint32))
        cubeplug_client.launch(k, CubeCount.dynamic(counts), [h], [])
        assert not cubeplug_client.to_numpy(h, "u32").any()
