"""Graph capture: record a block's launches, copies and fills once, replay them as often as asked.

``with client.capture() as graph:`` records what the calling thread issues inside the block instead
of running it; ``graph.replay()`` runs it in order on the thread's stream, ordered with the client's
other work like any launch. The arguments are checked when recorded, so a bad call fails at its
line, not at a replay; scalars are fixed at capture (capture again for new values). The graph holds
the handles it uses, so their memory stays reserved while it lives; what they contain may change
between replays (that is the point). Allocating inside the block is allowed (it happens at once).

This is the recorded replay every backend gets: each replayed launch takes the launcher's plan (the
fast path), with no Python of the user's in between. While no thread captures, the client's launch
path is untouched: the capture launcher stands in for the client's launcher only during a block.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from cubeplug.core.errors import CaptureError
from cubeplug.core.kernel import CubeCount, ExecutionMode, Kernel
from cubeplug.core.launcher import Launcher, as_count, check_arguments, check_buffers, unwrap_arrays

#: Operation kinds of a graph.
LAUNCH, LAUNCH_UNCHECKED, COPY, FILL = range(4)


class Graph:
    """Work recorded on one client by ``client.capture()``, replayed by :meth:`replay`."""

    def __init__(self, client: Any) -> None:
        self._client = client
        self._ops: list[tuple[Any, ...]] = []
        self._open = True  # recording
        self._closed = False

    def __len__(self) -> int:
        return len(self._ops)

    def __repr__(self) -> str:
        state = "closed" if self._closed else "recording" if self._open else f"{len(self._ops)} operations"
        return f"<cubeplug.Graph {state} on {self._client.backend}>"

    @property
    def closed(self) -> bool:
        """True once :meth:`close` ran."""
        return self._closed

    def record(self, op: tuple[Any, ...]) -> None:
        """Add an operation (the capture block's client calls, through the capture launcher)."""
        self._ops.append(op)

    def seal(self) -> None:
        """End the recording (the capture block exited)."""
        self._open = False

    def replay(self, times: int = 1) -> None:
        """Run the recorded work ``times`` times, in order, on the calling thread's stream."""
        if self._closed:
            raise CaptureError("this graph was closed; capture the work again to run it")
        if self._open:
            raise CaptureError("a graph replays once its capture block has ended")
        if isinstance(times, bool) or not isinstance(times, int) or times < 0:
            raise CaptureError(f"replay(times) takes a non-negative int, got {times!r}")
        client = self._client
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
                vals = list(kernel.check_scalars(scalars))
            else:
                vals = list(scalars)
            real.plan(kernel, mode)
        return (kind, kernel, count, bufs, vals)
