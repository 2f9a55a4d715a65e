"""CUDA streams and events for the core MultiStream (docs/memory.md), and event-completed futures.

Every cubeplug stream is a non-blocking CUDA stream (it never synchronises with the legacy default
stream). Flushing a stream records an ordering event with timing disabled; another stream waits on it
on the device (``cudaStreamWaitEvent``), the host with ``cudaEventSynchronize``. A faulting kernel
surfaces there: the runtime error is mapped to LaunchError, or to DeviceLostError for the "sticky"
errors after which the CUDA context is unusable.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any, Generic, TypeVar

from cubeplug.backends.cuda.device import DeviceGuard
from cubeplug.core.errors import CubeplugError, DeviceLostError, LaunchError
from cubeplug.core.stream import EventStreamBackend

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
        self._guard = guard or DeviceGuard(device)
        self._stream_cls = cupy.cuda.Stream
        self._event_cls = cupy.cuda.Event
        self._wait = runtime.streamWaitEvent
        self._record = runtime.eventRecord
        self._error = runtime.CUDARuntimeError

    def create_stream(self) -> CudaStream:
        """A new non-blocking CUDA stream on the device."""
        self._guard()
        return CudaStream(self._stream_cls(non_blocking=True), self.device)

    def event(self, timing: bool = False) -> Any:
        """A fresh CUDA event (timing disabled unless asked for)."""
        self._guard()
        return self._event_cls(block=False, disable_timing=not timing)

    def flush(self, stream: CudaStream) -> Any:
        """Record an ordering event after the stream's queued work (CUDA submits work at once)."""
        self._guard()
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


R = TypeVar("R")


class EventFuture(Future[R], Generic[R]):
    """A future completed when a CUDA event fires, then by ``finish()`` (which builds the result).

    ``result()`` completes it on the calling thread when the completer thread has not yet, so a
    blocking read costs no thread hand-off; callbacks and ``concurrent.futures.wait`` work too.
    """

    def __init__(self, event: Any, finish: Callable[[], R], wait: Callable[[Any], None]) -> None:
        super().__init__()
        self._event = event
        self._finish: Callable[[], R] | None = finish
        self._wait_fn = wait
        self._resolve_lock = threading.Lock()

    def resolve(self) -> None:
        """Wait for the event and set the result (once; later calls do nothing)."""
        if self._finish is None:
            return
        with self._resolve_lock:
            finish = self._finish
            if finish is None:
                return
            self._finish = None
            if not self.set_running_or_notify_cancel():
                self._event = None
                return
            try:
                if self._event is not None:
                    self._wait_fn(self._event)
                value = finish()
            except BaseException as e:
                self.set_exception(e)
            else:
                self.set_result(value)
            finally:
                self._event = None

    def result(self, timeout: float | None = None) -> R:
        """The result, waiting for the device if needed."""
        self.resolve()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception, waiting for the device if needed."""
        self.resolve()
        return super().exception(timeout)


class Completer:
    """A thread that resolves :class:`EventFuture` objects in submission order."""

    def __init__(self, name: str = "cubeplug-cuda-reads") -> None:
        self._queue: queue.SimpleQueue[EventFuture[Any] | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def submit(self, future: EventFuture[Any]) -> None:
        """Resolve ``future`` in the background."""
        self._queue.put(future)

    def close(self) -> None:
        """Stop after the futures already submitted."""
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            future = self._queue.get()
            if future is None:
                return
            future.resolve()
            del future
