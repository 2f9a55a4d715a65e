"""Streams: per-thread stream ids, the EventStreamBackend contract and MultiStream (docs/memory.md).

Work is ordered per stream. By default each thread has its own stream; ``client.stream()`` opens a
fresh one for a block. Backends with native streams (CUDA, OpenCL) implement
:class:`EventStreamBackend`; :class:`MultiStream` then keeps, per stream, a cursor (how many
operations it has issued) and how far it has synchronised with every other stream. When an
operation binds memory that another stream may still be writing, the current stream waits on an
event of that stream on the device, and the memory is pinned (kept reserved) until a garbage
collection thread sees the operation's event complete.
"""

from __future__ import annotations

import itertools
import logging
import queue
import threading
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any, Generic, Protocol, TypeVar

log = logging.getLogger("cubeplug.stream")

_stream_ids = itertools.count(1)
#: Each thread's stack of stream ids (``.stack``, made by :func:`current_stream_id`; its top is the
#: thread's stream). The launch paths read ``thread_streams.stack[-1]`` inline, a call less.
thread_streams = threading.local()
_local = thread_streams  # the former name, until every backend reads the public one


def current_stream_id() -> int:
    """The stream id of the calling thread: its own unless inside ``client.stream()``."""
    try:
        stack: list[int] = _local.stack
    except AttributeError:
        stack = _local.stack = [next(_stream_ids)]
    return stack[-1]


@contextmanager
def stream_scope(stream_id: int | None = None) -> Iterator[int]:
    """Run the block on a fresh stream (or on ``stream_id``); the previous one is restored after."""
    current_stream_id()
    sid = next(_stream_ids) if stream_id is None else stream_id
    _local.stack.append(sid)
    try:
        yield sid
    finally:
        _local.stack.pop()


S = TypeVar("S")
E = TypeVar("E")


class EventStreamBackend(ABC, Generic[S, E]):
    """Native streams and events of a device: create, flush to an event, wait on the device or host."""

    @abstractmethod
    def create_stream(self) -> S:
        """A new native stream (CUDA stream, in-order OpenCL queue...)."""

    @abstractmethod
    def flush(self, stream: S) -> E:
        """Submit the stream's pending work and return an event that completes after it."""

    @abstractmethod
    def wait_event(self, stream: S, event: E) -> None:
        """Make ``stream`` wait on the device for ``event`` before its later work."""

    @abstractmethod
    def wait_event_sync(self, event: E) -> None:
        """Block the calling thread until ``event`` completes; raise LaunchError if the work failed."""


class Binding(Protocol):
    """What MultiStream reads of a bound handle: the stream whose pools own its memory, and its
    slice token (``token``), whose ``stream`` is the last stream that queued work on it."""

    stream: int
    token: Any


@dataclass(slots=True)
class StreamState(Generic[S]):
    """A native stream with its cursor and the cursors it last synced with on other streams."""

    stream: S
    cursor: int = 0
    last_synced: dict[int, int] = field(default_factory=dict)


T = TypeVar("T")


class StreamPool(Generic[T]):
    """Lazily created stream slots, ``id % max_streams``, plus special slots for internal use."""

    def __init__(self, factory: Callable[[], T], max_streams: int, specials: int = 0) -> None:
        if max_streams < 1:
            raise ValueError("max_streams must be at least 1")
        self.max_streams = max_streams
        self._factory = factory
        self._slots: list[T | None] = [None] * max_streams
        self._specials: list[T | None] = [None] * specials

    def index(self, stream_id: int) -> int:
        """The slot of a stream id."""
        return stream_id % self.max_streams

    @property
    def slots(self) -> list[T | None]:
        """The slots themselves (None until first used), for hot paths that index them inline."""
        return self._slots

    def get(self, stream_id: int) -> T:
        """The slot of ``stream_id``, created on first use."""
        return self.get_index(stream_id % self.max_streams)

    def get_index(self, index: int) -> T:
        """The slot at ``index``, created on first use."""
        item = self._slots[index]
        if item is None:
            item = self._slots[index] = self._factory()
        return item

    def get_special(self, index: int) -> T:
        """The special (internal) slot at ``index``, created on first use."""
        item = self._specials[index]
        if item is None:
            item = self._specials[index] = self._factory()
        return item

    def created(self) -> Iterator[tuple[int, T]]:
        """The (index, item) of every slot created so far."""
        for i, item in enumerate(self._slots):
            if item is not None:
                yield i, item

    def created_specials(self) -> Iterator[T]:
        """Every special slot created so far."""
        for item in self._specials:
            if item is not None:
                yield item

    def clear(self) -> list[T]:
        """Forget every slot, special ones included, and return them (the next ``get`` creates anew)."""
        items = [item for item in (*self._slots, *self._specials) if item is not None]
        self._slots = [None] * self.max_streams
        self._specials = [None] * len(self._specials)
        return items


class GcThread(Generic[E]):
    """Holds objects (pinned memory tokens) until an event completes, then drops them."""

    def __init__(self, backend: EventStreamBackend[Any, E], name: str = "cubeplug-gc") -> None:
        self._backend = backend
        self._queue: queue.Queue[tuple[E, Any] | None] = queue.Queue(maxsize=64)
        self.errors: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def register(self, event: E, to_drop: Any) -> None:
        """Keep ``to_drop`` alive until ``event`` completes."""
        self._queue.put((event, to_drop))

    def drain(self) -> None:
        """Block until every registered event completed and its objects were dropped."""
        self._queue.join()

    def close(self) -> None:
        """Stop the thread after the pending tasks."""
        self._queue.put(None)

    @property
    def thread(self) -> threading.Thread:
        """The thread that waits for the events."""
        return self._thread

    def join(self, timeout: float | None = None) -> None:
        """Wait for the thread to stop (after :meth:`close`); a no-op when called from the thread itself."""
        if threading.current_thread() is not self._thread:
            self._thread.join(timeout)

    def _run(self) -> None:
        while True:
            task = self._queue.get()
            try:
                if task is None:
                    return
                event, to_drop = task
                try:
                    self._backend.wait_event_sync(event)
                except BaseException as e:  # recorded, surfaced at the next sync
                    self.errors.append(e)
                # Drop the event too: kept in this frame while the thread idles, a native event would
                # outlive the stream and the server it came from.
                del event, to_drop, task
            finally:
                self._queue.task_done()


@dataclass
class SharedBindingAnalysis:
    """What a resolve must do: wait on streams not synced since their latest work on the bound memory
    (``slices``, by stream slot), and pin memory owned by other streams until the work is done."""

    slices: dict[int, list[Any]] = field(default_factory=dict)
    pinned: list[Any] = field(default_factory=list)

    def shared(self, token: Any, index: int) -> None:
        """Record ``token`` as shared with the stream in slot ``index``."""
        self.slices.setdefault(index, []).append(token)


class ResolvedStreams(Generic[S, E]):
    """The current stream, synchronised with the bindings' streams; pins shared memory on exit."""

    __slots__ = ("_ms", "analysis", "current", "cursor", "stream")

    def __init__(self, ms: MultiStream[S, E], current: int, state: StreamState[S], analysis: Any) -> None:
        self._ms = ms
        self.current = current
        self.cursor = state.cursor
        self.stream: S = state.stream
        self.analysis: SharedBindingAnalysis | None = analysis

    def get(self, stream_id: int) -> S:
        """The native stream of another stream id."""
        return self._ms.streams.get(stream_id).stream

    def __enter__(self) -> ResolvedStreams[S, E]:
        return self

    def __exit__(self, *exc: object) -> None:
        analysis = self.analysis
        if analysis is not None and analysis.pinned:
            self._ms.pin(analysis, self.stream)


class MultiStream(Generic[S, E]):
    """Streams of one device with cursors, cross-stream event waits and pinned shared memory.

    The launch path calls :meth:`enter` (one pass over the bindings: waits, cursor) and, only when
    the analysis it returns pins memory, :meth:`pin` after queueing; other operations use
    :meth:`resolve` as a context manager, which does both.
    """

    def __init__(self, backend: EventStreamBackend[S, E], max_streams: int = 8) -> None:
        self.backend = backend
        self.max_streams = max_streams
        self.streams: StreamPool[StreamState[S]] = StreamPool(
            lambda: StreamState(backend.create_stream()), max_streams, specials=1
        )
        self.gc: GcThread[E] = GcThread(backend)
        #: Pinned memory of operations being queued, by ``id`` of the analysis' list: held from
        #: :meth:`enter` until :meth:`pin` hands it to the GC thread with an event. An operation
        #: interrupted between its queueing and its pin (a KeyboardInterrupt lands between any two
        #: bytecodes) so keeps its memory until :meth:`sync_all`, never releasing it under the device.
        self.held: dict[int, list[Any]] = {}
        # A collected MultiStream stops its GC thread (after the tasks already registered).
        self._finalizer = weakref.finalize(self, self.gc.close)

    def close(self) -> None:
        """Stop the GC thread once the pinned memory it holds was released."""
        self._finalizer()

    def resolve(self, stream_id: int, bindings: Iterable[Binding] = ()) -> ResolvedStreams[S, E]:
        """Synchronise ``stream_id`` with the bindings' streams and advance its cursor."""
        state, analysis = self.enter(stream_id, bindings)
        return ResolvedStreams(self, stream_id, state, analysis)

    def enter(
        self, stream_id: int, bindings: Iterable[Binding] = (), *, advance: bool = True
    ) -> tuple[StreamState[S], SharedBindingAnalysis | None]:
        """Make ``stream_id`` wait for the bindings' streams, advance its cursor; (state, analysis).

        When the analysis has ``pinned`` memory, call :meth:`pin` once the operation is queued.
        It records ``stream_id`` as the bindings' last stream, so it runs exactly once per operation.
        With ``advance=False`` it only analyses (no wait, no cursor step). A dropped handle raises
        AttributeError. Launch plans inline its common case (``cubeplug.core.plans``): keep the two
        in step.
        """
        max_streams = self.max_streams
        index = stream_id % max_streams
        slots = self.streams._slots
        current = slots[index] or self.streams.get_index(index)
        analysis: SharedBindingAnalysis | None = None
        for binding in bindings:
            token = binding.token
            last = token.stream
            token.stream = stream_id
            if binding.stream % max_streams != index:
                # The owner stream's pools may lend this slice again as soon as it looks free, with no
                # ordering against this stream: keep it reserved until this stream's work is done.
                if analysis is None:
                    analysis = SharedBindingAnalysis()
                if not analysis.pinned:
                    self.held[id(analysis.pinned)] = analysis.pinned
                analysis.pinned.append(token)
            if last < 0:
                continue
            origin = last % max_streams
            if origin == index:
                continue
            # The origin is the last stream that queued work on this memory (not only the stream that
            # allocated it), and any work it issued since the last sync counts: in-place writes made
            # on another stream are waited for too.
            state = slots[origin]
            if state is not None and current.last_synced.get(origin, -1) < state.cursor:
                if analysis is None:
                    analysis = SharedBindingAnalysis()
                analysis.shared(token, origin)
        if advance:
            if analysis is not None and analysis.slices:
                self.apply_analysis(stream_id, analysis)
            current.cursor += 1
        return current, analysis

    def pin(self, analysis: SharedBindingAnalysis, stream: S) -> None:
        """Keep the analysis' pinned memory reserved until the work queued on ``stream`` is done."""
        backend = self.backend
        origin = backend.flush(stream)
        gc_stream = self.streams.get_special(0).stream
        backend.wait_event(gc_stream, origin)
        event = backend.flush(gc_stream)
        # The native streams travel with the pinned memory: a driver must not see a queue released
        # (its server collected) while the GC thread still waits on one of its events.
        self.gc.register(event, (analysis.pinned, gc_stream, stream))
        self.held.pop(id(analysis.pinned), None)

    def update_shared_bindings(
        self, stream_id: int, bindings: Iterable[Binding]
    ) -> SharedBindingAnalysis | None:
        """Which bound memory needs a wait or a pin on ``stream_id`` (None: nothing to do); it records
        the bindings' new last stream like :meth:`enter`, without waiting or advancing."""
        return self.enter(stream_id, bindings, advance=False)[1]

    def apply_analysis(self, stream_id: int, analysis: SharedBindingAnalysis) -> None:
        """Flush each origin stream and make ``stream_id`` wait on its event."""
        backend = self.backend
        current = self.streams.get(stream_id)
        for origin in analysis.slices:
            state = self.streams.get_index(origin)
            event = backend.flush(state.stream)
            current.last_synced[origin] = state.cursor
            log.debug("stream %d waits on stream slot %d at cursor %d", stream_id, origin, state.cursor)
            backend.wait_event(current.stream, event)

    def sync(self, stream_id: int) -> None:
        """Block until the work of ``stream_id`` completed."""
        state = self.streams.get(stream_id)
        self.backend.wait_event_sync(self.backend.flush(state.stream))

    def sync_all(self) -> None:
        """Block until the work of every stream completed and pinned memory was released."""
        for _, state in list(self.streams.created()):
            self.backend.wait_event_sync(self.backend.flush(state.stream))
        self.held.clear()  # every stream is idle: what an interrupted operation held is free
        self.gc.drain()
