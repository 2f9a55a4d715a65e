"""Graph capture: record a block's launches, copies and fills once, replay them as often as asked.

``with client.capture() as graph:`` records what the calling thread issues inside the block instead
of running it; ``graph.replay()`` runs it in order on the thread's stream, ordered with the client's
other work like any launch. The arguments are checked when recorded, so a bad call fails at its
line, not at a replay; scalars are fixed at capture (capture again for new values). The graph holds
its own aliases of the handles it uses (:meth:`Handle.alias`), so their memory stays reserved while
it lives even if the user drops theirs; what they contain may change between replays (that is the
point). Allocating inside the block is allowed (it happens at once).

When the block ends the graph asks its server for a native replay (``ComputeServer.new_replay``,
:mod:`cubeplug.core.replay`): a CUDA graph, one WebGPU submit, pre-bound OpenCL kernels. Where the
server has none, the recorded replay runs each step through the launcher's plans (the fast path),
with no Python of the user's in between. While no thread captures, the client's launch path is
untouched: the capture launcher stands in for the client's launcher only during a block.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from cubeplug.core.errors import CaptureError, ValidationError
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import CubeCount, ExecutionMode, Kernel
from cubeplug.core.launcher import (
    Launcher,
    as_count,
    check_arguments,
    check_buffers,
    check_dynamic,
    unwrap_arrays,
)
from cubeplug.core.replay import COPY, FILL, LAUNCH, LAUNCH_UNCHECKED, Replay, Step

__all__ = ["COPY", "FILL", "LAUNCH", "LAUNCH_UNCHECKED", "CaptureLauncher", "Graph", "own"]


def own(handle: Any) -> Handle:
    """The graph's alias of a recorded handle (ValidationError for one already dropped)."""
    if not isinstance(handle, Handle) or handle.token is None:
        raise ValidationError(
            f"a capture records live handles, got {handle!r}: record the launch with a live handle"
        )
    return handle.alias()


class Graph:
    """Work recorded on one client by ``client.capture()``, replayed by :meth:`replay`."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._ops: list[tuple[Any, ...]] = []
        self._open = True  # recording
        self._closed = False
        #: The server's native replay of the steps, made when the block ends; None: recorded replay.
        self._native: Replay | None = None

    def __len__(self) -> int:
        return len(self._ops)

    def __repr__(self) -> str:
        if self._closed or self._open:
            state = "closed" if self._closed else "recording"
        else:
            state = f"{len(self._ops)} operations, {self.replayed_by}"
        return f"<cubeplug.Graph {state} on {self._client.backend}>"

    @property
    def replayed_by(self) -> str:
        """What replays this graph: the backend's native replay (e.g. "cuda graph") or "recorded"
        (each step through the client's launch path)."""
        native = self._native
        return "recorded" if native is None else native.kind

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def record(self, op: tuple[Any, ...]) -> None:
        """Add an operation (the capture block's client calls, through the capture launcher)."""
        self._ops.append(op)

    def seal(self, new_replay: Callable[[Sequence[Step]], Replay | None]) -> None:
        """End the recording (the capture block exited) and ask for a native replay of the steps
        (``new_replay`` is the server's, called under the client's lock)."""
        self._open = False
        if self._ops:
            self._native = new_replay(self.steps())

    def steps(self) -> list[Step]:
        """The recorded operations as :class:`~cubeplug.core.replay.Step` records."""
        steps = []
        for op in self._ops:
            kind = op[0]
            if kind <= LAUNCH_UNCHECKED:
                count = op[2]
                if count.handle is None and not (count.x and count.y and count.z):
                    continue  # no cubes: the launch path runs nothing either
                steps.append(Step(kind, tuple(op[3]), op[5], count, op[6]))
            elif kind == COPY:
                steps.append(Step(kind, (op[1], op[2])))
            else:
                steps.append(Step(kind, (op[1],), pattern=op[4]))
        return steps

    def replay(self, times: int = 1) -> None:
        """Run the recorded work ``times`` times, in order, on the calling thread's stream."""
        if self._closed:
            raise CaptureError("this graph was closed; capture the work again to run it")
        if self._open:
            raise CaptureError("a graph replays once its capture block has ended")
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise CaptureError(f"replay(times) takes a non-negative int, got {times!r}")
        client = self._client
        native = self._native
        if native is not None and client.capturing() is None:  # inside a capture: recorded below
            client.run_replay(native, times)
            return
        launch, unchecked = client.launch, client.launch_unchecked
        copy, fill = client.copy, client.fill
        for _ in range(times):
            for op in self._ops:
                kind = op[0]
                if kind == LAUNCH:
                    launch(op[1], op[2], op[3], op[4])
                elif kind == LAUNCH_UNCHECKED:
                    unchecked(op[1], op[2], op[3], op[4])
                elif kind == COPY:
                    copy(op[1], op[2])
                else:
                    fill(op[1], op[2], op[3])

    def close(self) -> None:
        """Release the graph: its handles' memory is free once nothing else holds it."""
        self._closed = True
        self._ops = []
        native, self._native = self._native, None
        if native is not None:
            native.close()

    def __enter__(self) -> Graph:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class CaptureLauncher:
    """The client's launcher while some thread captures: that thread's launches are recorded,
    checked as the launch would check them (and compiled); every other thread's, and everything
    else asked of a launcher, go to the real one."""

    def __init__(self, real: Launcher) -> None:
        self.real = real
        self.graphs: dict[int, Graph] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.real, name)

    def graph(self) -> Graph | None:
        """The graph the calling thread records into, if it captures."""
        return self.graphs.get(threading.get_ident())

    def launch(
        self, kernel: Any, count: Any, buffers: Sequence[Any] = (), scalars: Sequence[Any] = ()
    ) -> None:
        graph = self.graph()
        if graph is None:
            self.real.launch(kernel, count, buffers, scalars)
            return
        mode = self.real.settings.mode
        graph.record(self._op(LAUNCH, kernel, count, buffers, scalars, mode))

    def launch_unchecked(
        self, kernel: Any, count: Any, buffers: Sequence[Any] = (), scalars: Sequence[Any] = ()
    ) -> None:
        graph = self.graph()
        if graph is None:
            self.real.launch_unchecked(kernel, count, buffers, scalars)
            return
        graph.record(self._op(LAUNCH_UNCHECKED, kernel, count, buffers, scalars, ExecutionMode.UNCHECKED))

    def close(self, stand_in: Any) -> None:
        self.real.close(stand_in)

    def refuse(self, stand_in: Any, lock: Any) -> None:
        self.real.refuse(stand_in, lock)

    def _op(
        self,
        kind: int,
        kernel: Any,
        count: Any,
        buffers: Sequence[Any],
        scalars: Sequence[Any],
        mode: ExecutionMode,
    ) -> tuple[Any, ...]:
        """The recorded launch, its arguments checked now as the launch would check them, and the
        kernel compiled (so that a replay takes the plan from its first launch)."""
        if not isinstance(kernel, Kernel):
            raise CaptureError(f"launch takes a cubeplug.Kernel, got {type(kernel).__name__}")
        count = count if type(count) is CubeCount else as_count(count)
        check_arguments(kernel, buffers, scalars)
        checked = mode is ExecutionMode.CHECKED
        bufs = list(unwrap_arrays(kernel, buffers, checked=checked))
        real = self.real
        with real.settings.lock:
            if checked:
                check_buffers(real.server, kernel, bufs)
                if count.handle is not None:
                    check_dynamic(real.server, count.handle)
                vals = tuple(kernel.check_scalars(scalars))
            else:
                vals = tuple(scalars)
            real.plan(kernel, mode)
            compiled = real.compiled[kernel, mode]
        if count.handle is not None:  # the graph holds the count's memory too
            count = CubeCount.dynamic(own(count.handle))
        # The recorded replay relaunches with the caller's own scalars (Python numbers, which the
        # plans take inline; checked values are numpy scalars), a native one gets checked values.
        return (kind, kernel, count, [own(b) for b in bufs], list(scalars), compiled, vals)
