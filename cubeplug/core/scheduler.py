"""The single-queue scheduler: virtual streams over one device queue (DESIGN.md §7).

Backends with one queue (WebGPU, the CPU reference) cannot order work with native events. Each
virtual stream queues its tasks here; a flush hands a stream's tasks to the backend as one batch
(one command encoder and one submit on WebGPU, one hand-off to the worker on CPU), never one
submission per task. Because the device queue runs batches in submission order, a task that binds
memory last used by another stream with queued work is correct once that stream's queue is submitted
first (each slice token remembers the last stream that queued work on it).
Queued tasks hold their bindings, so their memory stays reserved until the backend drops them.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any, Protocol


class BoundHandle(Protocol):
    """What the scheduler reads of a binding: its memory token (``token.stream`` = last user)."""

    def memory(self) -> Any:
        """The slice token."""


class Scheduler:
    """Virtual streams that queue tasks and submit them in batches to one device queue."""

    def __init__(
        self,
        submit: Callable[[list[Any]], None],
        max_streams: int = 8,
        max_tasks: int = 64,
    ) -> None:
        self._submit = submit
        self.max_streams = max_streams
        self.max_tasks = max_tasks
        self._queues: list[list[Any]] = [[] for _ in range(max_streams)]
        #: Number of batches handed to the backend so far.
        self.submissions = 0

    def register(self, stream_id: int, task: Any, bindings: Iterable[BoundHandle] = ()) -> None:
        """Queue ``task`` on a virtual stream, first submitting other streams whose memory it binds."""
        max_streams = self.max_streams
        index = stream_id % max_streams
        queues = self._queues
        for binding in bindings:
            token = binding.memory()
            last = token.stream
            token.stream = stream_id
            if last < 0:
                continue
            origin = last % max_streams
            if origin != index and queues[origin]:
                self._submit_index(origin)
        q = queues[index]
        q.append(task)
        if len(q) >= self.max_tasks:
            self._submit_index(index)

    def pending(self, stream_id: int) -> int:
        """Number of tasks queued on a virtual stream and not yet submitted."""
        return len(self._queues[stream_id % self.max_streams])

    def flush(self, stream_id: int) -> None:
        """Submit the queued tasks of one virtual stream as one batch."""
        self._submit_index(stream_id % self.max_streams)

    def flush_all(self) -> None:
        """Submit the queued tasks of every virtual stream, one batch each."""
        for index, q in enumerate(self._queues):
            if q:
                self._submit_index(index)

    def _submit_index(self, index: int) -> None:
        batch = self._queues[index]
        if not batch:
            return
        self._queues[index] = []
        self.submissions += 1
        self._submit(batch)
