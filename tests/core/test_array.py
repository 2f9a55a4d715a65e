"""``cubeplug.Array`` on the cpu backend: creation, layout, views, numpy, errors, launches, DLPack."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import numpy as np
import pytest

import cubeplug
from cubeplug import Array, ValidationError
from cubeplug.core.handle import Tensor
from tests.conftest import make_cpu_client
from tests.core.kernels import ADD_ONE, AXPY


@pytest.fixture
def client() -> Any:
    made = make_cpu_client()
    yield made
    made.close()


def test_public_names() -> None:
    assert "Array" in cubeplug.__all__ and "from_dlpack" in cubeplug.__all__
    assert cubeplug.Array is Array


def test_import_stays_cheap() -> None:
    code = (
        "import sys, cubeplug; "
        "print('cubeplug.core.array' in sys.modules, 'cubeplug.registry' in sys.modules)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "False"]


def test_asarray_layout_and_read(client: Any) -> None:
    host = np.arange(6, dtype=np.int16).reshape(2, 3)
    arr = client.asarray(host)
    assert (arr.shape, arr.strides, arr.dtype, arr.ndim, arr.size, arr.itemsize, arr.nbytes) == (
        (2, 3), (3, 1), np.dtype(np.int16), 2, 6, 2, 12,
    )  # fmt: skip
    assert arr.client is client and arr.is_contiguous and len(arr) == 2
    assert arr.tensor == Tensor(arr.handle, (2, 3), (3, 1), np.dtype(np.int16))
    np.testing.assert_array_equal(np.asarray(arr, dtype=np.float64), host.astype(np.float64))
    assert "shape=(2, 3)" in repr(arr) and "on cpu" in repr(arr)


def test_asarray_converts_and_moves(client: Any) -> None:
    arr = client.asarray(np.arange(4, dtype=np.int64), dtype="f32")
    assert arr.dtype == np.float32
    assert client.asarray(arr) is arr
    assert client.asarray(arr, dtype="i32").dtype == np.int32
    other = make_cpu_client()
    try:
        moved = other.asarray(arr[1:])
        assert moved.client is other
        np.testing.assert_array_equal(moved.numpy(), [1, 2, 3])
    finally:
        other.close()


def test_zero_d_and_empty(client: Any) -> None:
    arr = client.asarray(np.arange(6, dtype=np.float32).reshape(2, 3))
    scalar = arr[1, 2]
    assert scalar.shape == () and scalar.numpy().shape == () and float(scalar.numpy()) == 5.0
    with pytest.raises(TypeError):
        len(scalar)
    empty = arr[1:1]
    assert empty.shape == (0, 3) and empty.handle.size == 0 and empty.numpy().shape == (0, 3)


def test_view_handle_covers_exactly_the_elements(client: Any) -> None:
    arr = client.asarray(np.arange(20, dtype=np.float32))
    view = arr[4:10]
    assert (view.handle.start, view.handle.size) == (16, 24)
    strided = client.asarray(np.arange(20, dtype=np.float32).reshape(4, 5))[1:3, 1:4]
    assert strided.strides == (5, 1) and not strided.is_contiguous
    assert (strided.handle.start, strided.handle.size) == (24, 32)


def test_array_from_a_larger_handle(client: Any) -> None:
    h = client.create(np.arange(10, dtype=np.float32))
    arr = Array(client, h, "f32", (2, 3))
    assert arr.handle.size == 24
    np.testing.assert_array_equal(arr.numpy(), np.arange(6).reshape(2, 3))
    with pytest.raises(ValidationError, match="spans 48 B"):
        Array(client, h, "f32", (3, 4))
    with pytest.raises(ValidationError, match="strides"):
        Array(client, h, "f32", (2, 3), (1,))
    with pytest.raises(ValidationError, match="Handle"):
        Array(client, np.zeros(3), "f32")


def test_numpy_of_handle_and_tensor_raise(client: Any) -> None:
    h = client.create(np.zeros(4, np.float32))
    with pytest.raises(ValidationError, match=r"client\.to_numpy\(handle, dtype\)"):
        np.asarray(h)
    with pytest.raises(ValidationError, match=r"read_tensor"):
        np.asarray(client.create_tensor(np.zeros((2, 2), np.float32)))


def test_launch_with_arrays_keeps_handles_on_the_plan(client: Any) -> None:
    x = client.asarray(np.arange(8, dtype=np.float32))
    y = client.asarray(np.ones(8, dtype=np.float32))
    client.launch(AXPY, 1, [x, y], [2.0, 8])
    client.launch(AXPY, 1, [x.handle, y.handle], [2.0, 8])  # the plan: plain handles
    client.launch(AXPY, 1, [x, y.handle], [2.0, 8])  # an Array goes to the general path
    np.testing.assert_array_equal(y.numpy(), 1 + 6 * np.arange(8, dtype=np.float32))
    ints = client.asarray(np.zeros(6, np.int32))
    client.launch(ADD_ONE, 1, [ints[2:]], [])
    np.testing.assert_array_equal(ints.numpy(), [0, 0, 1, 1, 1, 1])
    with pytest.raises(ValidationError, match=r"takes i32, got an Array of float32"):
        client.launch(ADD_ONE, 1, [x], [])
    client.launch_unchecked(ADD_ONE, 1, [ints], [])  # unchecked: the caller vouches for the dtype
    with pytest.raises(ValidationError, match="non-contiguous"):
        client.launch(ADD_ONE, 1, [client.asarray(np.zeros((2, 2), np.int32))[:, 0]], [])


def test_dlpack_cpu_exports_a_copy(client: Any) -> None:
    host = np.arange(12, dtype=np.uint8).reshape(3, 4)
    arr = client.asarray(host)
    assert arr.__dlpack_device__() == (1, 0)
    out = np.from_dlpack(arr[::2, 1:])
    np.testing.assert_array_equal(out, host[::2, 1:])
    with pytest.raises(BufferError, match="copy"):
        arr.__dlpack__(copy=False)
    with pytest.raises(AttributeError, match="cuda"):
        arr.__cuda_array_interface__  # noqa: B018


def test_from_dlpack_defaults_to_the_cpu_backend() -> None:
    host = np.arange(5, dtype=np.float32)
    arr = cubeplug.from_dlpack(host)
    assert arr.client.backend == "cpu"
    np.testing.assert_array_equal(arr.numpy(), host)
    assert cubeplug.from_dlpack(arr) is arr
    with pytest.raises(ValidationError, match="__dlpack__"):
        cubeplug.from_dlpack([1, 2, 3])


def test_from_dlpack_of_a_foreign_cpu_object(client: Any) -> None:
    class Foreign:  # a producer that is not numpy (as a CPU torch tensor is)
        def __init__(self, arr: np.ndarray) -> None:
            self.arr = arr

        def __dlpack__(self, **kwargs: Any) -> Any:
            return self.arr.__dlpack__(**kwargs)

        def __dlpack_device__(self) -> tuple[int, int]:
            return (1, 0)

    arr = cubeplug.from_dlpack(Foreign(np.arange(3, dtype=np.int32)), client=client)
    np.testing.assert_array_equal(arr.numpy(), [0, 1, 2])


def test_device_memory_the_backend_cannot_take(client: Any) -> None:
    class OnGpu:
        __cuda_array_interface__ = {"shape": (1,), "typestr": "<f4", "data": (0, False), "version": 3}

    with pytest.raises(ValidationError, match=r"copy it to the host first"):
        client.asarray(OnGpu())


def test_copy_false_is_refused(client: Any) -> None:
    arr = client.asarray(np.zeros(2, np.float32))
    with pytest.raises(ValueError, match="copy"):
        arr.__array__(copy=False)
    if np.lib.NumpyVersion(np.__version__) >= "2.0.0":
        with pytest.raises(ValueError, match="copy"):
            np.asarray(arr, copy=False)
