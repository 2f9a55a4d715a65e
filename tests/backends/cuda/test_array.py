"""``cubeplug.Array`` on CUDA: zero-copy DLPack and ``__cuda_array_interface__`` with CuPy and
PyTorch, both ways. The real-GPU half runs on the GPU machine (``pytest -m gpu tests/backends/cuda``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import cubeplug
from tests.backends.cuda.kernels import FILL


def _pointer(client: Any, arr: cubeplug.Array) -> int:
    ptr: int = client.server.export_pointer(arr.handle, 1)[0]
    return ptr


def test_array_basics(mode: str, client: Any) -> None:
    host = np.arange(12, dtype=np.float32).reshape(3, 4)
    arr = client.asarray(host)
    np.testing.assert_array_equal(arr.numpy(), host)
    np.testing.assert_array_equal(np.asarray(arr[1:, ::2]), host[1:, ::2])
    assert arr.__dlpack_device__() == (2, 0)
    flat = client.asarray(np.zeros(8, np.float32))
    client.launch(FILL, 1, [flat], [2.0, 4])
    np.testing.assert_array_equal(flat.numpy(), [2, 2, 2, 2, 0, 0, 0, 0])


@pytest.fixture
def gpu(mode: str) -> None:
    if mode != "gpu":
        pytest.skip("DLPack and CAI consumers need the real device (CuPy, PyTorch)")


def test_cuda_array_interface_is_zero_copy(gpu: None, client: Any, cp: Any) -> None:
    arr = client.asarray(np.arange(10, dtype=np.float32))
    cai = arr.__cuda_array_interface__
    assert cai["data"][0] == _pointer(client, arr)
    view = cp.asarray(arr)
    assert view.data.ptr == _pointer(client, arr)
    strided = arr[1::3]
    cai = strided.__cuda_array_interface__
    assert cai["data"][0] == _pointer(client, strided) and cai["strides"] == (12,)


def test_cupy_round_trip_is_zero_copy(gpu: None, client: Any, cp: Any) -> None:
    arr = client.asarray(np.arange(12, dtype=np.int32).reshape(3, 4))
    out = cp.from_dlpack(arr)
    assert out.data.ptr == _pointer(client, arr)
    out *= 2
    cp.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(arr.numpy(), 2 * np.arange(12).reshape(3, 4))
    np.testing.assert_array_equal(cp.from_dlpack(arr[:, 1::2]).get(), arr.numpy()[:, 1::2])
    back = cubeplug.from_dlpack(cp.arange(6, dtype=cp.float32), client=client)
    np.testing.assert_array_equal(back.numpy(), np.arange(6))


def test_torch_round_trip_is_zero_copy(gpu: None, client: Any) -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("torch has no CUDA")
    arr = client.asarray(np.arange(8, dtype=np.float32))
    t = torch.from_dlpack(arr)
    assert t.data_ptr() == _pointer(client, arr) and t.is_cuda
    t.mul_(3)
    torch.cuda.synchronize()
    np.testing.assert_array_equal(arr.numpy(), 3 * np.arange(8))
    back = cubeplug.from_dlpack(torch.arange(4, device="cuda", dtype=torch.int32), client=client)
    np.testing.assert_array_equal(back.numpy(), np.arange(4))


def test_importing_cuda_memory_zero_copy(gpu: None, client: Any, cp: Any) -> None:
    """CuPy and torch memory become Arrays without a copy, and stay the producer's memory."""
    src = cp.arange(16, dtype=cp.float32)
    arr = client.asarray(src)
    assert _pointer(client, arr) == src.data.ptr
    client.launch(FILL, 1, [arr], [5.0, 4])  # cubeplug writes into the producer's memory
    client.sync()
    np.testing.assert_array_equal(src[:4].get(), [5, 5, 5, 5])
    ref = src.data.ptr
    del src  # the Array keeps the producer's memory alive
    np.testing.assert_array_equal(arr.numpy()[4:], np.arange(4, 16))
    assert _pointer(client, arr) == ref
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        t = torch.arange(8, device="cuda", dtype=torch.float32)
        tarr = cubeplug.from_dlpack(t, client=client)
        assert _pointer(client, tarr) == t.data_ptr()
        np.testing.assert_array_equal(tarr.numpy(), np.arange(8))
