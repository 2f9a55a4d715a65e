"""The single-queue scheduler: virtual streams over one device queue (docs/memory.md).

Backends with one queue (WebGPU, the CPU reference) cannot order work with native events. Each
virtual stream queues its tasks here; a flush hands a stream's tasks to the backend as one batch
(one command encoder and one submit on WebGPU, one hand-off to the worker on CPU), never one
submission per task. Because the device queue runs batches in submission order, a task that binds
memory last used by another stream with queued work is correct once that stream's queue is submitted
first (each slice token remembers the last stream that queued work on it).
Queued tasks hold their bindings, so their memory stays reserved until the backend drops them.

Accepted work is never lost silently. A batch leaves its stream's queue when its submission begins;
when the submission raises instead (a KeyboardInterrupt landing in the middle of it, or any other
exception), the tasks that did not reach the device are recorded as a
:class:`~cubeplug.core.errors.WorkDroppedError` naming them, in the backend's error list, which its
next flush, sync or read raises; the backend's ``on_drop`` fails the futures among them (reads), so
nothing waits for them forever. How far a batch got is what the backend wrote in
:attr:`Scheduler.committed` while submitting (0 when it says nothing: every task counts as dropped),
or what its ``settle`` decides (the CPU worker claims a batch before running it, so the two agree).
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from time import perf_counter
from typing import Any, Protocol

from cubeplug.core.errors import WorkDroppedError


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
        *,
        errors: list[BaseException] | None = None,
        describe: Callable[[list[Any]], str] | None = None,
        on_drop: Callable[[list[Any], int, WorkDroppedError], None] | None = None,
        settle: Callable[[list[Any], int], int] | None = None,
        max_age: float | None = None,
    ) -> None:
        self._submit = submit
        self.max_streams = max_streams
        self.max_tasks = max_tasks
        self._queues: list[list[Any]] = [[] for _ in range(max_streams)]
        #: Seconds a stream's first queued task may wait before a task queued after it submits the
        #: batch (None: only ``max_tasks`` does). The device is idle while the host queues a batch,
        #: so batches of long kernels are best cut short; batches of short ones still fill up.
        self.max_age = max_age
        #: ``perf_counter()`` when each stream's queue got its first task.
        self._started = [0.0] * max_streams
        #: Number of batches handed to the backend so far.
        self.submissions = 0
        #: Where a dropped batch's WorkDroppedError goes (the backend's asynchronous errors).
        self.errors: list[BaseException] = errors if errors is not None else []
        #: ``[n]``: tasks of the batch being submitted that reached the device so far, as the backend
        #: reports them (reset to 0 before each submission; a backend may share this list).
        self.committed: list[int] = [0]
        self._describe = describe
        self._on_drop = on_drop
        self._settle = settle
        self._current: list[Any] | None = None

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
        elif self.max_age is not None:
            now = perf_counter()
            if len(q) == 1:
                self._started[index] = now
            elif now - self._started[index] > self.max_age:
                self._submit_index(index)

    def pending(self, stream_id: int) -> int:
        """Number of tasks queued on a virtual stream and not yet submitted."""
        return len(self._queues[stream_id % self.max_streams])

    def flush(self, stream_id: int) -> None:
        """Submit the queued tasks of one virtual stream as one batch."""
        self._submit_index(stream_id % self.max_streams)

    def flush_all(self) -> int:
        """Submit the queued tasks of every virtual stream, one batch each; the number of batches."""
        batches = 0
        for index, q in enumerate(self._queues):
            if q:
                self._submit_index(index)
                batches += 1
        return batches

    def _submit_index(self, index: int) -> None:
        queues = self._queues
        batch = queues[index]
        if not batch:
            return
        try:  # from here on the batch is the submission's: whatever interrupts it is accounted for
            queues[index] = []
            self.submissions += 1
            self._current = batch
            self.committed[0] = 0
            self._submit(batch)
            self._current = None  # not kept: the batch holds its tasks' memory
        except BaseException as error:
            self._dropped(index, batch, error)
            raise

    def _dropped(self, index: int, batch: list[Any], error: BaseException) -> None:
        """Record the tasks of ``batch`` that did not reach the device, and fail their futures."""
        if self._queues[index] is batch:  # interrupted before it left its queue: it is still queued
            return
        ran = self.committed[0] if self._current is batch else 0
        self._current = None
        if self._settle is not None:
            ran = self._settle(batch, ran)
        ran = max(0, min(ran, len(batch)))
        lost = batch[ran:]
        if not lost:
            return
        what = self._describe(lost) if self._describe is not None else f"{len(lost)} tasks"
        done = f"; the {ran} before them ran" if ran else ""
        drop = WorkDroppedError(
            f"{len(lost)} of the {len(batch)} tasks queued on stream slot {index} were dropped ({what}): "
            f"{type(error).__name__}{': ' if str(error) else ''}{error} interrupted their submission"
            f"{done}. Their work did not happen and what they write holds its earlier bytes: queue it "
            f"again"
        )
        drop.__cause__ = error
        self.errors.append(drop)
        if self._on_drop is not None:
            self._on_drop(batch, ran, drop)
