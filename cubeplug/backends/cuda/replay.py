"""The CUDA replay of a captured graph: a CUDA graph, recorded once by stream capture.

When the capture block ends, the server queues the graph's steps on a private stream in capture
mode (``cudaStreamBeginCapture``, relaxed, through CuPy's ``Stream.begin_capture``): each launch
through the kernel's own launcher (``cuLaunchKernel`` or CuPy's ``Function``), each copy as
``cudaMemcpyAsync`` and each fill as ``cudaMemsetAsync``, so the CUDA graph holds exactly what the
eager calls queue. A replay is then one ``cudaGraphLaunch`` per repetition on the thread's stream,
ordered after the other streams' work on the graph's handles as a launch is (the multistream's
events), where the eager path pays the launch path once per kernel.

Not captured (the graph then replays through the launch path): a launch whose count is read from
device memory (``CubeCount.dynamic``: read by the host at each launch), and a fill whose pattern is
not one repeated byte (the eager fill uploads its seed from pinned memory that is lent again).
"""

from __future__ import annotations

from typing import Any

from cubeplug.backends.cuda.device import DeviceGuard
from cubeplug.backends.cuda.stream import CudaStream
from cubeplug.plugin import Handle, MultiStream, Step, repeated_byte


def capturable(steps: list[Step] | tuple[Step, ...]) -> bool:
    """Whether a CUDA graph can hold every step (see the module's docstring)."""
    for step in steps:
        if step.dynamic:
            return False
        if step.is_fill and repeated_byte(step.pattern) is None:
            return False
    return True


class CudaReplay:
    """A CUDA graph (CuPy's ``cupy.cuda.Graph``, instantiated) replayed on the thread's stream."""

    kind = "cuda graph"

    def __init__(
        self,
        graph: Any,
        multistream: MultiStream[CudaStream, Any],
        guard: DeviceGuard,
        handles: tuple[Handle, ...],
    ) -> None:
        self._graph = graph
        self._ms = multistream
        self._guard = guard
        #: The graph's handles: they keep its memory and order it with other streams.
        self._handles = handles

    def run(self, stream_id: int, times: int) -> None:
        graph = self._graph
        if graph is None or not times:
            return
        if self._guard.multi:
            self._guard()
        ms = self._ms
        state, analysis = ms.enter(stream_id, self._handles)
        stream = state.stream
        launch = graph.launch
        for _ in range(times):
            launch(stream.cupy)
        if analysis is not None and analysis.pinned:
            ms.pin(analysis, stream)

    def close(self) -> None:
        # CuPy destroys the executable graph with its object; queued replays hold the device's copy.
        self._graph = None
