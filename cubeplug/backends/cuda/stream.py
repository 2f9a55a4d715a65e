"""CUDA streams and events for the core MultiStream (docs/memory.md).

Every cubeplug stream is a non-blocking CUDA stream (it never synchronises with the legacy default
stream). Flushing a stream records an ordering event with timing disabled; another stream waits on it
on the device (``cudaStreamWaitEvent``), the host with ``cudaEventSynchronize``. A faulting kernel
surfaces there: the runtime error is mapped to LaunchError, or to DeviceLostError for the "sticky"
errors after which the CUDA context is unusable.
"""

from __future__ import annotations

from typing import Any

from cubeplug.backends.cuda.device import DeviceGuard
from cubeplug.plugin import CubeplugError, DeviceLostError, EventStreamBackend, LaunchError

#: Runtime errors that leave the context unusable (illegal address, launch failure, ...).
STICKY_ERRORS = frozenset({214, 700, 702, 714, 715, 716, 717, 718, 719, 999})


class CudaStream:
    """A CUDA stream: CuPy's object (keeps the handle alive), its pointer and its device."""

    __slots__ = ("cupy", "device", "ptr")

    def __init__(self, stream: Any, device: int) -> None:
        self.cupy = stream
        self.ptr: int = stream.ptr
        self.device = device

    def __repr__(self) -> str:
        return f"<CudaStream 0x{self.ptr:x} cuda:{self.device}>"


def map_cuda_error(error: BaseException, what: str) -> CubeplugError:
    """A CUDA runtime or driver error as a cubeplug error naming ``what`` failed."""
    status = getattr(error, "status", None)
    if status in STICKY_ERRORS:
        return DeviceLostError(
            f"{what} failed: {error}. A kernel faulted (out-of-bounds or misaligned access?) and the CUDA "
            f"context of this process is unusable; fix the kernel and restart the process"
        )
    return LaunchError(f"{what} failed: {type(error).__name__}: {error}")


class CudaStreams(EventStreamBackend[CudaStream, Any]):
    """Non-blocking streams of one device, ordered with timing-disabled events."""

    def __init__(self, device: int, guard: DeviceGuard | None = None) -> None:
        import cupy
        from cupy.cuda import runtime

        self.device = device
        #: Makes the device current in the calling thread (shared with the server).
        self.guard = guard or DeviceGuard(device)
        self._stream_cls = cupy.cuda.Stream
        self._event_cls = cupy.cuda.Event
        self._wait = runtime.streamWaitEvent
        self._record = runtime.eventRecord
        self._error = runtime.CUDARuntimeError

    def create_stream(self) -> CudaStream:
        """A new non-blocking CUDA stream on the device."""
        self.guard()
        return CudaStream(self._stream_cls(non_blocking=True), self.device)

    def event(self, timing: bool = False) -> Any:
        """A fresh CUDA event (timing disabled unless asked for)."""
        self.guard()
        return self._event_cls(block=False, disable_timing=not timing)

    def flush(self, stream: CudaStream) -> Any:
        """Record an ordering event after the stream's queued work (CUDA submits work at once)."""
        self.guard()
        event = self._event_cls(block=False, disable_timing=True)
        self._record(event.ptr, stream.ptr)
        return event

    def record(self, stream: CudaStream, timing: bool = False) -> Any:
        """Record a (timing) event on a stream."""
        event = self.event(timing)
        self._record(event.ptr, stream.ptr)
        return event

    def wait_event(self, stream: CudaStream, event: Any) -> None:
        """Make ``stream`` wait on the device for ``event``."""
        self._wait(stream.ptr, event.ptr, 0)

    def wait_event_on(self, stream_ptr: int, event: Any) -> None:
        """Make a foreign stream (by its pointer, e.g. CuPy's current stream) wait for ``event``."""
        self._wait(stream_ptr, event.ptr, 0)

    def wait_event_sync(self, event: Any) -> None:
        """Block until ``event`` completed; a faulted kernel raises LaunchError or DeviceLostError."""
        try:
            event.synchronize()
        except self._error as e:
            raise map_cuda_error(e, "queued CUDA work") from e
