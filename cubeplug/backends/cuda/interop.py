"""Zero-copy interop: a CUDA handle as a CuPy array, or as any ``__cuda_array_interface__`` consumer.

The view shares the handle's device memory (no copy) and keeps its slice reserved for as long as the
view lives, even after the handle is dropped. Work cubeplug queued on the handle is ordered before
the consumer's work: the consumer's stream (CuPy's current stream) waits on an event of cubeplug's
stream, on the device. The other direction is the caller's: after writing through the view, make the
work visible to cubeplug with ``cupy.cuda.get_current_stream().synchronize()`` before launching on it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Protocol

import numpy as np

from cubeplug.plugin import DTYPES, Handle, ValidationError, current_stream_id, dtype_of, view_dims


class Exporter(Protocol):
    """What a view needs of the CUDA server (which imports this module): the handle's device
    address with the stream that orders its bytes, the streams' events, and the device."""

    device: Any
    streams: Any

    def export_pointer(self, handle: Handle, stream_id: int) -> tuple[int, Any]:
        """The handle's device address and the stream after whose queued work its bytes are final."""


def view_shape(
    handle: Handle, dtype: Any, shape: Sequence[int] | None
) -> tuple[tuple[int, ...], np.dtype[Any], int]:
    """(shape, dtype, bytes) of a view of ``handle``; ValidationError when it does not fit."""
    dt = DTYPES[dtype_of(dtype)]
    dims = view_dims(handle, dt.itemsize, shape)
    nbytes = math.prod(dims) * dt.itemsize
    if nbytes > handle.size:
        raise ValidationError(
            f"shape {dims} of {dt} needs {nbytes} B but the handle views only {handle.size} B"
        )
    return dims, dt, nbytes


def cupy_view(
    server: Exporter, handle: Handle, dtype: Any, shape: Sequence[int] | None, stream_id: int
) -> Any:
    """A ``cupy.ndarray`` over ``handle``'s memory, ordered after the work queued on it."""
    import cupy

    dims, dt, nbytes = view_shape(handle, dtype, shape)
    ptr, stream = server.export_pointer(handle, stream_id)
    consumer = cupy.cuda.get_current_stream()
    server.streams.wait_event_on(consumer.ptr, server.streams.flush(stream))
    memory = cupy.cuda.UnownedMemory(ptr, nbytes, handle.memory(), server.device)
    return cupy.ndarray(dims, dtype=dt, memptr=cupy.cuda.MemoryPointer(memory, 0))


class CudaArrayView:
    """Device memory of a handle exposed through ``__cuda_array_interface__`` (version 3)."""

    __slots__ = ("__cuda_array_interface__", "_owner")

    def __init__(
        self, ptr: int, shape: tuple[int, ...], dtype: np.dtype[Any], stream: int, owner: Any
    ) -> None:
        self._owner = owner
        self.__cuda_array_interface__ = {
            "shape": shape,
            "typestr": dtype.str,
            "data": (ptr, False),
            "version": 3,
            "strides": None,
            # Consumers wait on this stream before reading; cubeplug's work on the handle is queued there.
            "stream": stream or None,
        }

    def __repr__(self) -> str:
        cai = self.__cuda_array_interface__
        return f"<CudaArrayView 0x{cai['data'][0]:x} shape={cai['shape']} {cai['typestr']}>"


def array_view(
    server: Exporter, handle: Handle, dtype: Any, shape: Sequence[int] | None, stream_id: int
) -> CudaArrayView:
    """A :class:`CudaArrayView` of ``handle`` (for PyTorch, Numba, CuPy and any CAI consumer)."""
    dims, dt, _ = view_shape(handle, dtype, shape)
    ptr, stream = server.export_pointer(handle, stream_id)
    return CudaArrayView(ptr, dims, dt, stream.ptr, handle.memory())


def _call(client: Any, method: str, handle: Handle, dtype: Any, shape: Sequence[int] | None) -> Any:
    server = client.server
    if getattr(server, "backend", None) != "cuda":
        raise ValidationError(f"zero-copy CUDA views need a cuda client, this one is {server.backend!r}")
    sid = server.stream_id(current_stream_id())
    with client.launcher.settings.lock:  # the client's lock: serialised as every server call is
        if method == "cupy":
            return cupy_view(server, handle, dtype, shape, sid)
        return array_view(server, handle, dtype, shape, sid)


def as_cupy(client: Any, handle: Handle, dtype: Any, shape: Sequence[int] | None = None) -> Any:
    """``client.as_cupy(h, dtype, shape)``: a zero-copy ``cupy.ndarray`` over a handle of a cuda client."""
    return _call(client, "cupy", handle, dtype, shape)


def as_cuda_array(
    client: Any, handle: Handle, dtype: Any, shape: Sequence[int] | None = None
) -> CudaArrayView:
    """A zero-copy ``__cuda_array_interface__`` view of a handle of a cuda client (no CuPy needed)."""
    view: CudaArrayView = _call(client, "cai", handle, dtype, shape)
    return view
