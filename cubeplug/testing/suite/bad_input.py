"""Bad input raises its documented error, and the client keeps working with every other handle intact."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import BufferTooBig, CompileError, OutOfMemoryError, ValidationError
from cubeplug.core.kernel import CORE_DTYPES, Buffer, CubeCount, Kernel, Scalar
from cubeplug.testing import gates, kernels
from cubeplug.testing.waiting import eventually

MiB = 1 << 20
KEEP = np.arange(256, dtype=np.uint32) * 7 + 1


class Keeper:
    """A handle with known data and a kernel that works: both must survive every bad call."""

    def __init__(self, client: Any) -> None:
        self.client = client
        self.handle = client.create(KEEP)
        self.view = self.handle.offset_start(max(int(client.capabilities.offset_alignment), 16))

    def check(self) -> None:
        """The data is intact, reads and launches still work."""
        c = self.client
        np.testing.assert_array_equal(c.to_numpy(self.handle, "u32"), KEEP)
        np.testing.assert_array_equal(c.to_numpy(self.view, "u32"), KEEP[self.view.start // 4 :])
        if gates.compiles_suite_dialect(c):
            h = c.create(np.zeros(8, np.uint32))
            c.launch(kernels.FILL, 1, [h], [40, 8])
            np.testing.assert_array_equal(c.to_numpy(h, "u32"), 40 + np.arange(8))
        c.sync()


@pytest.fixture
def keeper(cubeplug_client: Any) -> Iterator[Keeper]:
    """A :class:`Keeper` checked after the test."""
    keep = Keeper(cubeplug_client)
    yield keep
    keep.check()


def _fill(client: Any) -> Kernel:
    return gates.kernel(client, kernels.FILL)


class TestBadInput:
    """Each bad input of the public API, one by one."""

    @pytest.mark.parametrize("size", [-1, -(2**40), 1.5, 2.0, "10", None, True, [4]], ids=repr)
    def test_bad_sizes(self, cubeplug_client: Any, keeper: Keeper, size: Any) -> None:
        with pytest.raises(ValidationError):
            cubeplug_client.empty(size)

    def test_absurd_size(self, cubeplug_client: Any, keeper: Keeper) -> None:
        with pytest.raises(BufferTooBig) as info:
            cubeplug_client.empty(1 << 62)
        assert info.value.requested == 1 << 62

    def test_buffer_too_big(self, cubeplug_client: Any, keeper: Keeper) -> None:
        gates.require(cubeplug_client, "max_alloc_bytes")
        limit = int(cubeplug_client.capabilities.max_alloc_bytes)
        with pytest.raises(BufferTooBig):
            cubeplug_client.empty(limit + 1)

    def test_bad_data(self, cubeplug_client: Any, keeper: Keeper) -> None:
        for data in ([1, 2, 3], "text", 12, np.array([object()], dtype=object)):
            with pytest.raises(ValidationError):
                cubeplug_client.create(data)

    def test_handle_of_another_client(
        self, cubeplug_client: Any, keeper: Keeper, cubeplug_cpu_client: Any
    ) -> None:
        foreign = cubeplug_cpu_client.create(np.zeros(64, np.uint32))
        with pytest.raises(ValidationError, match="another client"):
            cubeplug_client.launch(_fill(cubeplug_client), 1, [foreign], [1, 64])
        with pytest.raises(ValidationError, match="another client"):
            cubeplug_client.read_one(foreign)
        assert not cubeplug_cpu_client.to_numpy(foreign, "u32").any()

    def test_offsets_beyond_the_handle(self, cubeplug_client: Any, keeper: Keeper) -> None:
        h = keeper.handle
        bads: list[Callable[[], Any]] = [
            lambda: h.offset_start(h.size + 1), lambda: h.offset_end(h.size + 1),
            lambda: h.offset_start(h.size // 2 + 4).offset_end(h.size // 2),
            lambda: h.offset_start(-4), lambda: h.offset_end(1.5),
        ]  # fmt: skip
        for bad in bads:
            with pytest.raises(ValidationError):
                bad()

    def test_wrong_number_of_buffers(self, cubeplug_client: Any, keeper: Keeper) -> None:
        k = _fill(cubeplug_client)
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        for buffers in ([], [h, h]):
            with pytest.raises(ValidationError, match="buffers"):
                cubeplug_client.launch(k, 1, buffers, [1, 64])

    def test_wrong_number_of_scalars(self, cubeplug_client: Any, keeper: Keeper) -> None:
        k = _fill(cubeplug_client)
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        for scalars in ([], [1], [1, 2, 3]):
            with pytest.raises(ValidationError, match="scalars"):
                cubeplug_client.launch(k, 1, [h], scalars)

    @pytest.mark.parametrize(
        ("dtype", "value"),
        [("u32", -1), ("u32", 2**32), ("i32", 2**31), ("i32", 1.5), ("i32", "seven"), ("f32", 1e39),
         ("f32", "x"), ("u32", None)],
        ids=repr,
    )  # fmt: skip
    def test_scalar_that_does_not_fit(
        self, cubeplug_client: Any, keeper: Keeper, dtype: str, value: Any
    ) -> None:
        k = gates.kernel(cubeplug_client, kernels.typed_add(dtype))
        x, y = cubeplug_client.create(np.zeros(4, np.uint32)), cubeplug_client.create(np.zeros(4, np.uint32))
        with pytest.raises(ValidationError, match="'a'"):
            cubeplug_client.launch(k, 1, [x, y], [value, 4])

    def test_buffer_not_a_whole_number_of_elements(self, cubeplug_client: Any, keeper: Keeper) -> None:
        h = cubeplug_client.create(np.zeros(6, np.uint8))
        with pytest.raises(ValidationError, match="multiple"):
            cubeplug_client.launch(_fill(cubeplug_client), 1, [h], [1, 1])
        with pytest.raises(ValidationError):
            cubeplug_client.to_numpy(h, "u32")

    def test_kernel_without_a_source_for_the_backend(self, cubeplug_client: Any, keeper: Keeper) -> None:
        h = cubeplug_client.create(np.zeros(4, np.float32))
        with pytest.raises(ValidationError, match="no source"):
            cubeplug_client.launch(kernels.NOWHERE, 1, [h], [])
        with pytest.raises(ValidationError, match="no source"):
            cubeplug_client.launch_unchecked(kernels.NOWHERE, 1, [h], [])

    def test_not_a_kernel(self, cubeplug_client: Any, keeper: Keeper) -> None:
        with pytest.raises(ValidationError):
            cubeplug_client.launch("fill_u32", 1, [keeper.handle], [1, 4])

    def test_dropped_handle(self, cubeplug_client: Any, keeper: Keeper, cubeplug_cpu_client: Any) -> None:
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        view = h.offset_start(16)
        h.drop()
        assert h.is_dropped
        bad_calls: list[Callable[[], Any]] = [
            lambda: cubeplug_client.read_one(h),
            lambda: h.offset_start(4),
            lambda: cubeplug_client.to_client(h, cubeplug_cpu_client),
        ]
        if gates.compiles_suite_dialect(cubeplug_client):
            bad_calls.append(lambda: cubeplug_client.launch(kernels.FILL, 1, [h], [1, 64]))
        for bad in bad_calls:
            with pytest.raises(ValidationError, match="dropped"):
                bad()
        assert cubeplug_client.to_numpy(view, "u32").size == 60  # a view taken before the drop lives on
        with cubeplug_client.create(np.ones(4, np.uint32)) as scoped:
            assert cubeplug_client.to_numpy(scoped, "u32").sum() == 4
        assert scoped.is_dropped

    @pytest.mark.parametrize("count", [(-1,), (1, -1), (1, 1, -1), (2**32,), (1.5,), (None,)], ids=repr)
    def test_bad_cube_count(self, cubeplug_client: Any, keeper: Keeper, count: tuple[Any, ...]) -> None:
        with pytest.raises(ValidationError):
            CubeCount(*count)
        with pytest.raises(ValidationError):  # refused before the kernel is looked at
            cubeplug_client.launch(kernels.FILL, count, [keeper.handle], [1, 4])

    def test_dynamic_count_too_small(self, cubeplug_client: Any, keeper: Keeper) -> None:
        gates.require(cubeplug_client, "dynamic_count")
        small = cubeplug_client.create(np.ones(2, np.uint32))
        with pytest.raises(ValidationError, match="12"):
            cubeplug_client.launch(gates.kernel(cubeplug_client, kernels.GEOMETRY), CubeCount.dynamic(small),
                                   [keeper.handle], [])  # fmt: skip

    def test_compile_error(self, cubeplug_client: Any, keeper: Keeper) -> None:
        k = gates.kernel(cubeplug_client, kernels.BROKEN)
        h = cubeplug_client.create(np.zeros(4, np.float32))
        with pytest.raises(CompileError) as info:
            cubeplug_client.launch(k, 1, [h], [])
        error = info.value
        assert error.kernel == "broken" and error.backend == cubeplug_client.backend
        assert "broken" in error.dump()
        with pytest.raises(CompileError):  # a failed compile is not cached as a success
            cubeplug_client.launch(k, 1, [h], [])

    def test_unsupported_dtype(self, cubeplug_client: Any, keeper: Keeper) -> None:
        lacking = sorted({"f16", "f64", "i64", "u64", "i8", "u8", "i16", "u16", "bool"}
                         - cubeplug_client.capabilities.dtypes)  # fmt: skip
        if not lacking:
            pytest.skip(gates.lacks("a dtype to refuse: it declares every one"))
        h = cubeplug_client.create(np.zeros(8, np.uint64))
        for dtype in lacking:  # every dtype the backend does not declare is refused before compiling
            sources = dict.fromkeys(kernels.SUITE_DIALECTS, "")
            in_param = Kernel(f"uses_{dtype}", [Buffer("x", dtype), Scalar("n", "u32")], sources)
            # Only the source uses it (an f16 local in a kernel of u32 arrays): refused the same way.
            in_source = Kernel(f"inside_{dtype}", [Buffer("x", "u32"), Scalar("n", "u32")], sources,
                               dtypes=(dtype,))  # fmt: skip
            # A core dtype (bool) in the source needs nothing enabled: Kernel leaves it out.
            refused = [(in_param, f"param 'x' uses {dtype}")]
            if dtype not in CORE_DTYPES:
                refused.append((in_source, f"its source uses {dtype}"))
            else:
                assert in_source.dtypes == ()
            for k, use in refused:
                for launch in (cubeplug_client.launch, cubeplug_client.launch_unchecked):
                    with pytest.raises(ValidationError, match=rf"{use}\b.* does not support"):
                        launch(k, 1, [h], [1])

    def test_out_of_memory_under_the_limit(self, cubeplug_new_client: Any) -> None:
        # The limit counts pages, whose sizes depend on the pool ladder: it is large enough for the
        # keeper's page and a first chunk on any ladder, and the chunks fill it in under 16 steps.
        limit, chunk = 256 * MiB, 16 * MiB
        client = cubeplug_new_client(memory={"limit": limit})
        keep = Keeper(client)
        held: list[Any] = []
        with pytest.raises(OutOfMemoryError) as info:
            for _ in range(limit // chunk):
                held.append(client.create(np.full(chunk // 4, len(held), np.uint32)))
        assert isinstance(info.value, MemoryError) and info.value.limit == limit
        assert held, "a first chunk fits under the limit"
        with pytest.raises(OutOfMemoryError):  # still full: the failure reserved nothing
            client.empty(chunk)
        for i, h in enumerate(held):
            got = client.to_numpy(h, "u32")
            assert got[0] == got[-1] == i, f"chunk {i} corrupted"
        keep.check()
        del held[:2]
        client.sync()
        replacement = eventually(lambda: client.create(np.full(chunk // 4, 99, np.uint32)), OutOfMemoryError)
        assert client.to_numpy(replacement, "u32")[-1] == 99
        keep.check()

    # ------------------------------------------------------------------ issue 17, item 5 and item 3
    @pytest.mark.parametrize("what", ["handle", "none", "int", "string"])
    def test_read_takes_a_list(self, cubeplug_client: Any, keeper: Keeper, what: str) -> None:
        value = {"handle": keeper.handle, "none": None, "int": 42, "string": "h"}[what]
        for read in (cubeplug_client.read, cubeplug_client.read_async):
            with pytest.raises(ValidationError, match="list of handles"):
                read(value)

    @pytest.mark.parametrize("shape", [(5, 5), (300,), (-1, 7), ("a",), 2.5, (1.5, 2)], ids=repr)
    def test_to_numpy_shape_that_does_not_fit(
        self, cubeplug_client: Any, keeper: Keeper, shape: Any
    ) -> None:
        with pytest.raises(ValidationError, match="shape"):
            cubeplug_client.to_numpy(keeper.handle, "u32", shape)
        assert cubeplug_client.to_numpy(keeper.handle, "u32", (16, -1)).shape == (16, 16)

    def test_to_numpy_of_no_handle(self, cubeplug_client: Any, keeper: Keeper) -> None:
        for bad in (None, 42, keeper.handle.memory()):
            with pytest.raises(ValidationError, match="Handle"):
                cubeplug_client.to_numpy(bad, "u32")

    def test_launch_arguments_that_are_no_lists(self, cubeplug_client: Any, keeper: Keeper) -> None:
        k = _fill(cubeplug_client)
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        c = cubeplug_client
        bad = [((None, [1, 64]), "buffers"), (([h], None), "scalars"), ((h, [1, 64]), "buffers"),
               (([h], 7), "scalars"), ((None, None), "buffers")]  # fmt: skip
        for rounds in range(3):  # the first launch (general path), then with a plan (and a C launcher)
            for (buffers, scalars), what in bad:
                for launch in (c.launch, c.launch_unchecked):
                    with pytest.raises(ValidationError, match=what):
                        launch(k, 1, buffers, scalars)
            c.launch(k, 1, [h], [rounds, 64])
            c.launch_unchecked(k, 1, [h], [rounds, 64])
        np.testing.assert_array_equal(c.to_numpy(h, "u32"), 2 + np.arange(64))

    @pytest.mark.parametrize("fn", [42, None, "launch"], ids=repr)
    def test_profile_needs_a_function(self, cubeplug_client: Any, keeper: Keeper, fn: Any) -> None:
        with pytest.raises(ValidationError, match="function"):
            cubeplug_client.profile(fn)

    def test_count_beyond_the_device_limits(self, cubeplug_client: Any, keeper: Keeper) -> None:
        c = cubeplug_client
        limits = tuple(c.capabilities.max_cube_count)
        if all(m >= 0xFFFFFFFF for m in limits):
            return  # every count a CubeCount holds runs here: nothing beyond the limits to refuse
        k = _fill(c)
        h = c.create(np.zeros(8, np.uint32))
        counts = [tuple(m + 1 if a == axis else 1 for a in range(3)) for axis, m in enumerate(limits)
                  if m < 0xFFFFFFFF]  # fmt: skip
        counts.append((2**32 - 1, 65535, 1))  # accepted by OpenCL on PoCL, it ran for days
        for rounds in range(3):  # the first launch (general path), then with a plan (and a C launcher)
            for count in counts:
                for launch in (c.launch, c.launch_unchecked):
                    with pytest.raises(ValidationError, match="cubes per dimension"):
                        launch(k, count, [h], [1, 8])
                    with pytest.raises(ValidationError, match="cubes per dimension"):
                        launch(k, CubeCount(*count), [h], [1, 8])
            c.launch(k, 1, [h], [rounds, 8])
        c.sync()
        np.testing.assert_array_equal(c.to_numpy(h, "u32"), 2 + np.arange(8))

    def test_dynamic_count_beyond_the_device_limits(self, cubeplug_client: Any, keeper: Keeper) -> None:
        c = cubeplug_client
        gates.require(c, "dynamic_count")
        limits = tuple(c.capabilities.max_cube_count)
        if all(m >= 0xFFFFFFFF for m in limits):
            return  # every count a CubeCount holds runs here: nothing beyond the limits to refuse
        k = _fill(c)
        h = c.create(np.zeros(8, np.uint32))
        big = c.create(np.array([2**32 - 1, 65535, 1], np.uint32))
        try:  # refused, or dispatched as nothing (WebGPU skips an indirect count beyond its limits)
            c.launch(k, CubeCount.dynamic(big), [h], [5, 8])
            c.sync()
        except ValidationError as e:
            assert "cubes per dimension" in str(e)
        c.launch(k, 1, [h], [1, 8])
        np.testing.assert_array_equal(c.to_numpy(h, "u32"), 1 + np.arange(8))
