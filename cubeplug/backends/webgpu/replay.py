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
from cubeplug.backends.webgpu.queue import COPY, DISPATCH, REPLAY, RUN, WRITE
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


def replay_tasks(tasks: list[tuple[Any, ...]], upload: Any) -> tuple[tuple[Any, ...], ...]:
    """The eager tasks as a replay holds them: consecutive dispatches of one pipeline, bind group
    and scalar block merged into a RUN (encoding one then costs one call per dispatch, as raw wgpu
    does: on the H200's Vulkan a replay of 1000 single dispatches cost 6.3 us a kernel against raw
    wgpu's 5.0), and each WRITE ``(WRITE, buffer, offset, data, keep)`` replaced by a COPY from a
    buffer that ``upload(data)`` made holding ``data`` (a write would end the submit)."""
    out: list[Any] = []
    for task in tasks:
        op = task[0]
        if op == DISPATCH:
            last = out[-1] if out else None
            groups = (task[4], task[5], task[6])
            if isinstance(last, list) and last[1] is task[1] and last[2] is task[2] and last[3] == task[3]:
                last[4].append(groups)
            else:
                out.append([RUN, task[1], task[2], task[3], [groups]])
        elif op == WRITE:
            data = task[3]
            out.append((COPY, upload(data), 0, task[1], task[2], len(data), task[4]))
        else:
            out.append(task)
    return tuple((RUN, t[1], t[2], t[3], tuple(t[4])) if isinstance(t, list) else t for t in out)
