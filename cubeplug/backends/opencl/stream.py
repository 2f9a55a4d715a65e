"""OpenCL streams: one in-order command queue per stream, markers as events (docs/memory.md).

:class:`OpenCLStreams` is the :class:`EventStreamBackend` the core :class:`MultiStream` drives: an
event is a marker enqueued after the stream's work (and the queue flushed so the work starts), a
device-side wait is a barrier with a wait list on the waiting queue, and a host wait is
``event.wait()``. :class:`EventWaiter` (the toolkit's completer thread) runs callbacks once events
complete, so that ``read_async`` never blocks its caller.
"""

from __future__ import annotations

import functools
from typing import Any

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.plugin import Completer, EventStreamBackend, LaunchError, call_when_done


class OpenCLStreams(EventStreamBackend[Any, Any]):
    """In-order ``cl.CommandQueue`` streams of one device and their marker events."""

    def __init__(self, ctx: DeviceContext, profiling: bool = True) -> None:
        import pyopencl as cl

        self.ctx = ctx
        self.profiling = profiling and bool(
            int(ctx.device.queue_properties) & cl.command_queue_properties.PROFILING_ENABLE
        )
        self._props: Any = cl.command_queue_properties.PROFILING_ENABLE if self.profiling else 0
        self._cl = cl
        self._marker = cl.enqueue_marker
        self._barrier = cl.enqueue_barrier

    def create_stream(self) -> Any:
        """A new in-order command queue (with profiling when enabled)."""
        return self._cl.CommandQueue(self.ctx.context, self.ctx.device, properties=self._props)

    def flush(self, stream: Any) -> Any:
        """Enqueue a marker after the queue's work, submit it, and return the marker event."""
        event = self._marker(stream)
        stream.flush()
        return event

    def wait_event(self, stream: Any, event: Any) -> None:
        """Make the queue wait on the device for ``event`` before its later commands."""
        self._barrier(stream, wait_for=[event])

    def wait_event_sync(self, event: Any) -> None:
        """Block until ``event`` completed; LaunchError if the work before it failed."""
        try:
            event.wait()
        except self._cl.Error as e:
            raise LaunchError(f"queued OpenCL work failed on {self.ctx.name}: {e}") from e
        status = event.command_execution_status
        if status < 0:
            raise LaunchError(
                f"queued OpenCL work failed on {self.ctx.name} with execution status {status}"
            )


class EventWaiter(Completer):
    """The toolkit's completer thread for OpenCL reads: ``submit(event, callback)`` calls
    ``callback(None)`` once ``event`` completed, or ``callback(error)`` when the work before it failed,
    in submission order. A callback's own failure does not stop the thread."""

    def __init__(self, streams: OpenCLStreams, name: str = "cubeplug-opencl-waiter") -> None:
        super().__init__(name, functools.partial(call_when_done, streams.wait_event_sync))
