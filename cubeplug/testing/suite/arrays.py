"""``cubeplug.Array`` on the backend under test: creation, views, reads and launches against numpy.

DLPack round trips run where the device declares a DLPack device (``ComputeServer.dlpack_device``);
elsewhere the test checks that asking for one says what to do instead.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.core.array import Array
from cubeplug.core.errors import ValidationError
from cubeplug.registry.selection import from_dlpack
from cubeplug.testing import gates
from cubeplug.testing.kernels import ADD_FROM, ADD_ONE, cubes
from cubeplug.testing.suite.lang import lang_axpy, lang_missing


class TestArrays:
    """Arrays made, viewed, read back and launched on the backend under test, equal to numpy."""

    def test_asarray_round_trip(self, cubeplug_client: Any) -> None:
        host = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
        arr = cubeplug_client.asarray(host)
        assert isinstance(arr, Array)
        assert (arr.shape, arr.dtype, arr.strides, arr.ndim, arr.size) == (
            (2, 3, 4), np.dtype(np.float32), (12, 4, 1), 3, 24,
        )  # fmt: skip
        assert arr.nbytes == host.nbytes and len(arr) == 2
        np.testing.assert_array_equal(arr.numpy(), host)
        np.testing.assert_array_equal(np.asarray(arr), host)

    def test_asarray_dtype_and_lists(self, cubeplug_client: Any) -> None:
        arr = cubeplug_client.asarray([1, 2, 3], dtype="i32")
        assert arr.dtype == np.int32
        np.testing.assert_array_equal(arr.numpy(), [1, 2, 3])

    def test_empty_array(self, cubeplug_client: Any) -> None:
        arr = cubeplug_client.empty_array((4, 5), "u32")
        assert (arr.shape, arr.dtype, arr.strides) == ((4, 5), np.dtype(np.uint32), (5, 1))
        assert arr.handle.size == 80
        assert cubeplug_client.empty_array(0, "f32").numpy().shape == (0,)

    def test_views_share_memory(self, cubeplug_client: Any) -> None:
        host = np.arange(60, dtype=np.int32).reshape(6, 10)
        arr = cubeplug_client.asarray(host)
        for key in (
            1,
            -1,
            (2, 3),
            slice(1, 4),
            (slice(None), slice(2, 9, 3)),
            (Ellipsis, 4),
            (slice(None, None, 2), Ellipsis),
            (None, 3),
            (slice(5, 2),),
        ):
            view = arr[key]
            assert view.handle.memory() is arr.handle.memory()
            np.testing.assert_array_equal(view.numpy(), host[key], err_msg=repr(key))
        # A write through the base shows in a view made before it.
        view = arr[2]
        cubeplug_client.write(arr.handle, (host + 1).tobytes())
        np.testing.assert_array_equal(view.numpy(), host[2] + 1)

    def test_handle_and_tensor_wrap_without_copy(self, cubeplug_client: Any) -> None:
        handle = cubeplug_client.create(np.arange(8, dtype=np.float32))
        arr = cubeplug_client.asarray(handle, "f32")
        assert arr.handle is handle
        np.testing.assert_array_equal(arr.numpy(), np.arange(8, dtype=np.float32))
        tensor = cubeplug_client.create_tensor(np.ones((3, 5), np.int32))
        from_tensor = cubeplug_client.asarray(tensor)
        assert from_tensor.handle.memory() is tensor.handle.memory()
        np.testing.assert_array_equal(from_tensor.numpy(), np.ones((3, 5), np.int32))

    def test_copy_is_contiguous_and_independent(self, cubeplug_client: Any) -> None:
        host = np.arange(20, dtype=np.int32).reshape(4, 5)
        arr = cubeplug_client.asarray(host)
        for view in (arr, arr[1:3], arr[:, 1::2]):
            dup = view.copy()
            assert dup.is_contiguous and dup.handle.memory() is not arr.handle.memory()
            np.testing.assert_array_equal(dup.numpy(), np.asarray(view))

    def test_launch_takes_arrays(self, cubeplug_client: Any) -> None:
        kernel = gates.kernel(cubeplug_client, ADD_ONE)
        host = np.arange(100, dtype=np.int32)
        arr = cubeplug_client.asarray(host)
        cubeplug_client.launch(kernel, cubes(100), [arr], [100])
        cubeplug_client.launch(kernel, cubes(100), [arr], [100])  # through the plan's general path
        cubeplug_client.launch_unchecked(kernel, cubes(100), [arr], [100])
        np.testing.assert_array_equal(arr.numpy(), host + 3)
        src = cubeplug_client.asarray(np.full(100, 5, np.int32))
        cubeplug_client.launch(gates.kernel(cubeplug_client, ADD_FROM), cubes(100), [src, arr.handle], [100])
        np.testing.assert_array_equal(arr.numpy(), host + 8)

    def test_launch_refuses_a_strided_view(self, cubeplug_client: Any) -> None:
        kernel = gates.kernel(cubeplug_client, ADD_ONE)
        arr = cubeplug_client.asarray(np.zeros((4, 4), np.int32))
        with pytest.raises(ValidationError, match="non-contiguous Array"):
            cubeplug_client.launch(kernel, 1, [arr[:, 1]], [4])

    def test_lang_kernel_takes_arrays(self, cubeplug_client: Any) -> None:
        reason = lang_missing(cubeplug_client)
        if reason is not None:
            pytest.skip(reason)
        x = np.arange(64, dtype=np.float32)
        y = np.ones(64, dtype=np.float32)
        ax, ay = cubeplug_client.asarray(x), cubeplug_client.asarray(y)
        lang_axpy.launch(cubeplug_client, 1, 64, ax, ay, 2.0)
        lang_axpy.launch(cubeplug_client, 1, 64, ax, ay, 2.0)  # the fast dispatcher
        lang_axpy.launch_unchecked(cubeplug_client, 1, 64, ax, ay.handle, 2.0)
        np.testing.assert_allclose(ay.numpy(), y + 6 * x)

    def test_numpy_refuses_a_handle(self, cubeplug_client: Any) -> None:
        handle = cubeplug_client.empty(16)
        with pytest.raises(ValidationError, match="to_numpy"):
            np.asarray(handle)

    def test_bad_input(self, cubeplug_client: Any) -> None:
        arr = cubeplug_client.asarray(np.zeros((3, 4), np.float32))
        with pytest.raises(ValidationError, match="dtype"):
            cubeplug_client.asarray(cubeplug_client.empty(8))
        with pytest.raises(ValidationError, match="numbers"):
            cubeplug_client.asarray(np.array([object()], dtype=object))
        with pytest.raises(ValidationError, match="positive slice steps"):
            arr[::-1]
        with pytest.raises(ValidationError, match="fancy indexing"):
            arr[[0, 1]]
        with pytest.raises(IndexError):
            arr[3]
        with pytest.raises(IndexError):
            arr[0, 0, 0]
        with pytest.raises(ValidationError, match="unknown dtype"):
            cubeplug_client.empty_array((2,), "complex64")
        with pytest.raises(ValueError, match="copy"):
            arr.__array__(copy=False)

    def test_dlpack(self, cubeplug_client: Any) -> None:
        host = np.arange(12, dtype=np.float32).reshape(3, 4)
        arr = cubeplug_client.asarray(host)
        if cubeplug_client.server.dlpack_device() is None:  # no DLPack device: says what to do
            with pytest.raises(ValidationError, match=r"\.numpy\(\)"):
                arr.__dlpack_device__()
            with pytest.raises(ValidationError, match=r"\.numpy\(\)"):
                np.from_dlpack(arr)
            return
        kind, _ = arr.__dlpack_device__()
        if kind != 1:
            pytest.skip("numpy takes only host DLPack capsules; the GPU tests cover device ones")
        np.testing.assert_array_equal(np.from_dlpack(arr), host)
        np.testing.assert_array_equal(np.from_dlpack(arr[:, 1::2]), host[:, 1::2])
        back = from_dlpack(host, client=cubeplug_client)
        assert isinstance(back, Array)
        np.testing.assert_array_equal(back.numpy(), host)
