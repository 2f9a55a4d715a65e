"""The device queue. This backend runs each operation at once, in the caller's thread.

A backend with one queue per device keeps it in ``queue.py``, as the CPU and WebGPU backends do: its
hook ``cubeplug_event_stream_backend`` returns None and ``cubeplug.plugin.Scheduler`` orders the
virtual streams into batches for the queue. A backend with native streams (CUDA streams, OpenCL
command queues) has a ``stream.py`` instead, implementing ``cubeplug.plugin.EventStreamBackend``
(returned by that hook). Running work immediately is the simplest correct choice: every operation
is complete, in order, when the call returns.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any


class ImmediateQueue:
    """Runs operations now; their errors are kept and raised at the next flush or sync, like a device's."""

    def __init__(self) -> None:
        #: Errors of operations, surfaced by the server at the next flush or sync.
        self.errors: list[BaseException] = []

    def run(self, fn: Callable[..., Any], *args: Any) -> None:
        """Run one operation, recording its error instead of raising it."""
        try:
            fn(*args)
        except Exception as e:
            self.errors.append(e)
