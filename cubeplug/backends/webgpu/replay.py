"""The WebGPU replay of a captured graph: its tasks built once, a whole replay in one command buffer.

A WebGPU command buffer cannot be submitted twice and compute passes have no bundles, so a replay
encodes its dispatches again each time; what it saves is everything before the encoder. When the
capture block ends the server turns the steps into the very queue tasks its eager calls would
queue (pipelines, cached bind groups, packed scalar blocks, copies and clears), and a replay queues
them as one REPLAY task: the queue encodes them in place, ``times`` times, in the same command
encoder and submit as the stream's other queued work. A fill the eager path writes from the host
(any pattern but zeros) becomes a copy from a buffer holding the repeated pattern, made once, so
that nothing in a replay ends the submit.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from cubeplug.backends.webgpu.health import DeviceHealth
from cubeplug.backends.webgpu.queue import COPY, REPLAY, WRITE
from cubeplug.plugin import Handle, Scheduler


class TaskRecorder:
    """Stands in for the server's scheduler while a graph's steps are turned into tasks: keeps what
    the server's own ``execute``, ``copy`` and ``fill`` queue, in order, instead of queueing it."""

    def __init__(self) -> None:
        self.tasks: list[tuple[Any, ...]] = []

    def register(self, stream_id: int, task: Any, bindings: Iterable[Any] = ()) -> None:
        self.tasks.append(task)

    def pending(self, stream_id: int) -> int:
        """Never empty: a write is then queued as a task (which a replay can hold), not run at once."""
        return 1


class WgpuReplay:
    """A graph's tasks, queued as one REPLAY task per ``run`` (under the client's lock)."""

    kind = "webgpu: one submit per replay"

    def __init__(
        self,
        scheduler: Scheduler,
        health: DeviceHealth,
        tasks: tuple[tuple[Any, ...], ...],
        handles: tuple[Handle, ...],
    ) -> None:
        self._scheduler = scheduler
        self._health = health
        self.tasks = tasks
        self._handles = handles

    def run(self, stream_id: int, times: int) -> None:
        health = self._health
        if health.reason is not None:
            raise health.error()
        if times:
            # The handles order the replay after other streams' work on them, like a launch's.
            self._scheduler.register(stream_id, (REPLAY, self.tasks, times, ()), self._handles)

    def close(self) -> None:
        self.tasks = ()  # queued REPLAY tasks keep their own reference until submitted


def without_writes(tasks: list[tuple[Any, ...]], upload: Any) -> tuple[tuple[Any, ...], ...]:
    """``tasks`` with each WRITE ``(WRITE, buffer, offset, data, keep)`` replaced by a COPY from a
    buffer that ``upload(data)`` made holding ``data`` (a write would end the submit)."""
    out = []
    for task in tasks:
        if task[0] == WRITE:
            data = task[3]
            out.append((COPY, upload(data), 0, task[1], task[2], len(data), task[4]))
        else:
            out.append(task)
    return tuple(out)
