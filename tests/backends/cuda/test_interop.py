"""Zero-copy interop with CuPy and ``__cuda_array_interface__``; device-to-device ``create``."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from cubeplug import ValidationError
from cubeplug.backends.cuda.interop import CudaArrayView, as_cuda_array, as_cupy
from tests.backends.cuda.kernels import FILL


def _device_calls(mode: str) -> list[str]:
    import cupy

    return list(cupy.cuda.runtime.calls) if mode == "fake" else []


def test_as_cupy_is_a_zero_copy_view(mode, client, cp) -> None:  # type: ignore[no-untyped-def]
    h = client.create(np.arange(8, dtype=np.float32))
    client.launch(FILL, 1, [h], [2.0, 4])
    view = as_cupy(client, h, "f32")
    assert view.shape == (8,) and view.dtype == np.float32
    np.testing.assert_array_equal(view.get(), [2, 2, 2, 2, 4, 5, 6, 7])
    cai = view.__cuda_array_interface__
    assert cai["data"][0] == client.server.export_pointer(h, 1)[0]
    # Writes through the view are visible to cubeplug once CuPy's stream is synchronised.
    if mode == "gpu":
        view *= 10
    else:
        view.set_host(view.get() * 10)
    cp.cuda.get_current_stream().synchronize()
    np.testing.assert_array_equal(client.to_numpy(h, "f32"), [20, 20, 20, 20, 40, 50, 60, 70])


def test_as_cupy_shapes_offsets_and_errors(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(np.arange(12, dtype=np.int32))
    m = as_cupy(client, h.offset_start(16), "i32", (2, 4))
    np.testing.assert_array_equal(m.get(), np.arange(4, 12).reshape(2, 4))
    with pytest.raises(ValidationError, match="needs"):
        as_cupy(client, h, "i32", (4, 4))
    with pytest.raises(ValidationError, match="whole number"):
        as_cupy(client, client.create(b"abc"), "i32")


def test_view_keeps_memory_alive_after_the_handle_goes(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(np.full(1024, 3, dtype=np.int32))
    view = as_cupy(client, h, "i32")
    del h
    gc.collect()
    others = [client.create(np.zeros(1024, dtype=np.int32)) for _ in range(4)]  # would reuse the slice
    np.testing.assert_array_equal(view.get(), 3)
    del others


def test_cuda_array_interface_view(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(np.arange(6, dtype=np.float64))
    view = as_cuda_array(client, h, "f64", (2, 3))
    assert isinstance(view, CudaArrayView)
    cai = view.__cuda_array_interface__
    assert cai["shape"] == (2, 3) and cai["typestr"] == "<f8" and cai["version"] == 3
    assert cai["data"][0] == client.server.export_pointer(h, 1)[0] and cai["stream"]


def test_create_from_a_device_array_is_device_to_device(mode, client, cp) -> None:  # type: ignore[no-untyped-def]
    host = np.arange(1 << 16, dtype=np.float32)
    dev = cp.asarray(host)
    before = len(_device_calls(mode))
    h = client.create(dev)
    np.testing.assert_array_equal(client.to_numpy(h, "f32"), host)
    if mode == "fake":
        calls = _device_calls(mode)[before:]
        assert not any("kind=1" in c for c in calls), calls  # no host-to-device copy
    t = client.create_tensor(cp.asarray(host[: 30 * 70].reshape(30, 70)))
    assert not t.is_contiguous
    np.testing.assert_array_equal(client.read_tensor(t), host[: 30 * 70].reshape(30, 70))


def test_as_cupy_refuses_other_backends(cpu_client) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(ValidationError, match="cuda client"):
        as_cupy(cpu_client, cpu_client.create(b"abcd"), "u8")
