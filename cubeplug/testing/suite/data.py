"""Data in and out: round trips of every size, views with byte offsets, tensors and strided reads."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import ValidationError
from cubeplug.core.handle import Tensor
from cubeplug.core.kernel import DTYPES
from cubeplug.testing import gates, kernels
from cubeplug.testing.waiting import wait_until

MiB = 1 << 20
ROUND_TRIP_SIZES = [0, 1, 3, 4095, MiB + 1]
#: The "large" round trip: this many bytes, or half the device's largest allocation if smaller.
LARGE = 64 * MiB


def random_bytes(n: int, seed: int = 0) -> bytes:
    """``n`` reproducible random bytes."""
    return np.random.default_rng(seed).integers(0, 256, n, dtype=np.uint8).tobytes()


def view_offset(client: Any) -> int:
    """A byte offset every backend accepts for a binding: the declared alignment, at least 16."""
    return max(int(client.capabilities.offset_alignment), 16)


class TestRoundTrip:
    """``create`` then ``read`` gives the bytes back, for every size and every input type."""

    @pytest.mark.parametrize("size", ROUND_TRIP_SIZES, ids=["0", "1", "3", "4095", "1MiB+1"])
    def test_create_read(self, cubeplug_client: Any, size: int) -> None:
        data = random_bytes(size, size)
        h = cubeplug_client.create(data)
        assert h.size == size
        assert bytes(cubeplug_client.read_one(h)) == data

    def test_large(self, cubeplug_client: Any) -> None:
        cap = cubeplug_client.capabilities.max_alloc_bytes
        size = min(LARGE, cap // 2) if cap else LARGE
        data = np.random.default_rng(7).integers(0, 2**32, size // 4, dtype=np.uint32)
        h = cubeplug_client.create(data)
        assert h.size == data.nbytes
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "u32"), data)

    @pytest.mark.parametrize("size", [0, 1, 3, 4095, MiB + 1], ids=["0", "1", "3", "4095", "1MiB+1"])
    def test_empty(self, cubeplug_client: Any, size: int) -> None:
        h = cubeplug_client.empty(size)
        assert h.size == size
        assert len(cubeplug_client.read_one(h)) == size

    @pytest.mark.parametrize("dtype", list(DTYPES))
    def test_numpy_of_every_dtype(self, cubeplug_client: Any, dtype: str) -> None:
        # Storage is untyped: any dtype round-trips, whether or not kernels may use it.
        data = kernels.sample(dtype, 37)
        h = cubeplug_client.create(data)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, dtype), data)
        shaped = cubeplug_client.to_numpy(cubeplug_client.create(data[:36]), dtype, shape=(6, 6))
        np.testing.assert_array_equal(shaped, data[:36].reshape(6, 6))

    def test_input_types(self, cubeplug_client: Any) -> None:
        data = random_bytes(64, 1)
        arr = np.frombuffer(data, np.uint8)
        for given in (data, bytearray(data), memoryview(data), arr, arr.reshape(8, 8)):
            assert bytes(cubeplug_client.read_one(cubeplug_client.create(given))) == data
        strided = np.arange(32, dtype=np.int32)[::2]  # not contiguous: uploaded as its logical values
        np.testing.assert_array_equal(
            cubeplug_client.to_numpy(cubeplug_client.create(strided), "i32"), strided
        )

    def test_read_many_and_async(self, cubeplug_client: Any) -> None:
        blobs = [random_bytes(n, n) for n in (5, 0, 1000, 4096)]
        handles = [cubeplug_client.create(b) for b in blobs]
        assert [bytes(b) for b in cubeplug_client.read(handles)] == blobs
        future = cubeplug_client.read_async(handles)
        assert [bytes(b) for b in future.result(timeout=60)] == blobs

    def test_reads_follow_writes(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.FILL)
        h = cubeplug_client.create(np.zeros(300, np.uint32))
        for value in (1, 5, 9):
            cubeplug_client.launch(k, kernels.cubes(300), [h], [value, 300])
            np.testing.assert_array_equal(
                cubeplug_client.to_numpy(h, "u32"), value + np.arange(300, dtype=np.uint32)
            )

    def test_staging_buffers(self, cubeplug_client: Any) -> None:
        sizes = [0, 16, 4096]
        buffers = cubeplug_client.reserve_staging(sizes)
        assert [b.nbytes for b in buffers] == sizes
        buffers[2][:] = np.arange(4096) % 251
        h = cubeplug_client.create(buffers[2])
        assert bytes(cubeplug_client.read_one(h)) == buffers[2].tobytes()


class TestViews:
    """Views with byte offsets read and bind exactly their bytes."""

    def test_offsets_accumulate(self, cubeplug_client: Any) -> None:
        a = view_offset(cubeplug_client)
        data = random_bytes(8 * a, 2)
        h = cubeplug_client.create(data)
        v = h.offset_start(a)
        assert v.size == 7 * a and bytes(cubeplug_client.read_one(v)) == data[a:]
        w = v.offset_end(a).offset_start(a)
        assert w.size == 5 * a and bytes(cubeplug_client.read_one(w)) == data[2 * a : -a]
        assert bytes(cubeplug_client.read_one(h.offset_start(3).offset_end(5))) == data[3:-5]
        empty = h.offset_start(4 * a).offset_end(4 * a)
        assert empty.size == 0 and bytes(cubeplug_client.read_one(empty)) == b""

    def test_launch_on_view(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.FILL)
        a = view_offset(cubeplug_client)
        n = 100
        sentinel = np.full(a // 4 + n + a // 4, 0xDEAD, np.uint32)
        h = cubeplug_client.create(sentinel)
        view = h.offset_start(a).offset_end(a)
        cubeplug_client.launch(k, kernels.cubes(n), [view], [10, n])
        expected = sentinel.copy()
        expected[a // 4 : a // 4 + n] = 10 + np.arange(n)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "u32"), expected)
        np.testing.assert_array_equal(cubeplug_client.to_numpy(view, "u32"), 10 + np.arange(n))

    def test_two_views_of_one_allocation(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.typed_add("u32"))
        a = view_offset(cubeplug_client)
        words = a // 4
        n = 3 * words
        data = np.arange(2 * n, dtype=np.uint32)
        h = cubeplug_client.create(data)
        x, y = h.offset_end(n * 4), h.offset_start(n * 4)  # the first and the second half
        cubeplug_client.launch(k, kernels.cubes(n), [x, y], [1000, n])
        expected = data.copy()
        expected[n:] = data[:n] + 1000
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "u32"), expected)

    def test_offset_alignment(self, cubeplug_client: Any) -> None:
        k = gates.kernel(cubeplug_client, kernels.FILL)
        align = int(cubeplug_client.capabilities.offset_alignment)
        h = cubeplug_client.create(np.zeros(64, np.uint32))
        view = h.offset_start(4)
        if align > 4:  # an offset the backend cannot bind: a ValidationError naming the alignment
            with pytest.raises(ValidationError, match=str(align)):
                cubeplug_client.launch(k, 1, [view], [1, 8])
            return
        cubeplug_client.launch(k, 1, [view], [1, 8])
        np.testing.assert_array_equal(cubeplug_client.to_numpy(h, "u32")[:10], [0, 1, 2, 3, 4, 5, 6, 7, 8, 0])

    def test_can_mut(self, cubeplug_client: Any) -> None:
        h = cubeplug_client.create(b"abcd" * 16)
        cubeplug_client.sync()
        wait_until(h.can_mut, "a handle no view and no queued work holds can be mutated")
        view = h.offset_start(16)
        assert not h.can_mut() and not view.can_mut()
        del view
        assert h.can_mut()


class TestTensors:
    """Tensors keep shape, strides and dtype; ``read_tensor`` honours any strides."""

    @pytest.mark.parametrize("shape", [(0,), (7,), (3, 5), (4, 1, 6), (0, 3), (2, 3, 4, 5)], ids=str)
    @pytest.mark.parametrize("dtype", ["f32", "i32", "u8", "f64"])
    def test_round_trip(self, cubeplug_client: Any, shape: tuple[int, ...], dtype: str) -> None:
        arr = kernels.sample(dtype, int(np.prod(shape))).reshape(shape)
        t = cubeplug_client.create_tensor(arr)
        assert t.shape == shape and t.dtype == arr.dtype and len(t.strides) == len(shape)
        if not cubeplug_client.capabilities.pitched_tensors:
            assert t.is_contiguous
        out = cubeplug_client.read_tensor(t)
        assert out.shape == shape and out.dtype == arr.dtype
        np.testing.assert_array_equal(out, arr)

    def test_empty_tensor(self, cubeplug_client: Any) -> None:
        t = cubeplug_client.empty_tensor((5, 3), "f32")
        assert t.shape == (5, 3) and t.dtype == np.float32 and t.size == 15
        assert t.handle.size >= 15 * 4
        assert cubeplug_client.read_tensor(t).shape == (5, 3)

    def test_pitched_rows(self, cubeplug_client: Any) -> None:
        gates.require(cubeplug_client, "pitched_tensors")
        arr = np.arange(5 * 3, dtype=np.float32).reshape(5, 3)
        t = cubeplug_client.create_tensor(arr)
        assert t.strides[-1] == 1 and t.strides[0] >= 3
        assert t.handle.size >= ((5 - 1) * t.strides[0] + 3) * 4
        np.testing.assert_array_equal(cubeplug_client.read_tensor(t), arr)

    def test_strided_read(self, cubeplug_client: Any) -> None:
        arr = np.arange(4 * 6, dtype=np.int32).reshape(4, 6)
        t = cubeplug_client.create_tensor(arr)
        transposed = Tensor(t.handle, (6, 4), (t.strides[1], t.strides[0]), t.dtype)
        np.testing.assert_array_equal(cubeplug_client.read_tensor(transposed), arr.T)
        every_other_row = Tensor(t.handle, (2, 6), (2 * t.strides[0], t.strides[1]), t.dtype)
        np.testing.assert_array_equal(cubeplug_client.read_tensor(every_other_row), arr[::2])
