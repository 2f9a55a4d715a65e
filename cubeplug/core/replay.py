"""What a captured graph hands its server to replay natively: the recorded steps, and :class:`Replay`.

A graph (:mod:`cubeplug.core.graph`) records launches, copies and fills as :class:`Step` records,
each already checked, its kernel compiled and its fill pattern encoded. When the capture block
ends, the graph asks its server for a native replay (``ComputeServer.new_replay(steps)``): the CUDA
backend records them into a CUDA graph, WebGPU pre-builds its dispatches and submits a whole replay
at once, OpenCL pre-binds every argument. A server that returns None (the default, and what a
backend returns for steps it cannot replay natively) gets the recorded replay, which runs the steps
through the client's launch path: every backend, third-party ones included, can replay.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import CubeCount
from cubeplug.core.launcher import Compiled

#: Kinds of steps (and of the operations a graph records).
LAUNCH, LAUNCH_UNCHECKED, COPY, FILL = range(4)


@dataclass(frozen=True, slots=True)
class Step:
    """One recorded operation, ready to be replayed by a backend.

    A launch has its ``compiled`` kernel (in the launch's mode), ``count`` (static unless
    ``count.handle`` is set), ``handles`` (the buffers, in order) and checked ``scalars``. A copy has
    ``handles == (src, dst)``; a fill ``handles == (handle,)`` and the ``pattern`` of one element.
    The handles are the graph's own: they hold the memory for the graph's lifetime.
    """

    kind: int
    handles: tuple[Handle, ...]
    compiled: Compiled | None = None
    count: CubeCount | None = None
    scalars: tuple[Any, ...] = ()
    pattern: bytes = b""

    @property
    def is_launch(self) -> bool:
        """A launch, checked or not (its ``compiled``, ``count`` and ``scalars`` are set)."""
        return self.kind <= LAUNCH_UNCHECKED

    @property
    def is_copy(self) -> bool:
        """A copy of ``handles[0]`` into ``handles[1]`` (same size, checked not to overlap)."""
        return self.kind == COPY

    @property
    def is_fill(self) -> bool:
        """A fill of ``handles[0]`` with ``pattern`` repeated (its size a multiple of it)."""
        return self.kind == FILL

    @property
    def dynamic(self) -> bool:
        """A launch whose cube count is read from device memory (``CubeCount.dynamic``)."""
        return self.count is not None and self.count.handle is not None


class Replay(Protocol):
    """A backend's native replay of a graph's steps (made by ``ComputeServer.new_replay``)."""

    #: What replays, in words (shown by ``repr(graph)`` and ``graph.replayed_by``), e.g. "cuda graph".
    kind: str

    def run(self, stream_id: int, times: int) -> None:
        """Queue the steps ``times`` times on ``stream_id``, after the work of other streams that
        their handles wait for, like a launch. Called under the client's lock."""

    def close(self) -> None:
        """Release what the replay holds on the device (called once; the graph is closed)."""


def unique_handles(steps: Sequence[Step]) -> tuple[Handle, ...]:
    """Every handle the steps use, once each (in first-use order): what a replay orders its stream
    with (a replay of 1000 launches on two buffers waits for two, not 2000)."""
    seen: dict[int, Handle] = {}
    for step in steps:
        for h in step.handles:
            # One per memory token: a graph holds an alias per recorded use, and ordering with
            # other streams is kept per token (the slice), whatever the view.
            seen.setdefault(id(h.token), h)
        if step.count is not None and step.count.handle is not None:
            seen.setdefault(id(step.count.handle.token), step.count.handle)
    return tuple(seen.values())

