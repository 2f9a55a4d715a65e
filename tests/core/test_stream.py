"""MultiStream (seed 001's four tests, ported) and per-thread stream ids."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

from cubeplug.core.stream import (
    EventStreamBackend,
    MultiStream,
    StreamPool,
    current_stream_id,
    stream_scope,
)

MAX_STREAMS = 4


@dataclass
class FakeEvent:
    """An event: which stream slot flushed and how many ops it had then."""

    stream: FakeStream
    position: int


@dataclass
class FakeStream:
    """A stream that records its operations, including waits on other streams' events."""

    name: int
    ops: list[str] = field(default_factory=list)


class RecordingBackend(EventStreamBackend[FakeStream, FakeEvent]):
    """Streams that only record what MultiStream asks of them."""

    def __init__(self) -> None:
        self.created = 0
        self.host_waits: list[FakeEvent] = []

    def create_stream(self) -> FakeStream:
        self.created += 1
        return FakeStream(self.created)

    def flush(self, stream: FakeStream) -> FakeEvent:
        stream.ops.append("flush")
        return FakeEvent(stream, len(stream.ops))

    def wait_event(self, stream: FakeStream, event: FakeEvent) -> None:
        stream.ops.append(f"wait:{event.stream.name}@{event.position}")

    def wait_event_sync(self, event: FakeEvent) -> None:
        self.host_waits.append(event)


class Token:
    """Stands in for a slice token: ``stream`` is the last stream that queued work on it."""

    __slots__ = ("__weakref__", "name", "stream")

    def __init__(self, name: str, stream: int) -> None:
        self.name = name
        self.stream = stream


@dataclass
class FakeBinding:
    token: Token
    stream: int  # the stream whose pools own the memory


def binding(stream: int, name: str = "") -> FakeBinding:
    return FakeBinding(Token(name or f"s{stream}", stream), stream)


def test_analysis_shared_bindings_1() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    b1, b2 = binding(1), binding(2)
    ms.resolve(1)
    ms.resolve(2)
    analysis = ms.update_shared_bindings(1, [b1, b2])
    assert analysis is not None
    assert analysis.slices == {ms.streams.index(2): [b2.token]}


def test_analysis_shared_bindings_2() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    b1, b2, b3 = binding(1), binding(2), binding(1)
    ms.resolve(1)
    ms.resolve(2)
    analysis = ms.update_shared_bindings(1, [b1, b2, b3])
    assert analysis is not None
    assert analysis.slices == {ms.streams.index(2): [b2.token]}
    assert b2.token.stream == 1, "the binding now belongs to the stream that used it last"


def test_analysis_no_shared() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    ms.resolve(1)
    ms.resolve(2)
    assert ms.update_shared_bindings(1, [binding(1), binding(1), binding(1)]) is None


def test_memory_owned_by_another_stream_is_pinned_even_without_a_wait() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    ms.resolve(2)
    b = binding(2)
    with ms.resolve(1, [b]):
        pass  # first use: wait + pin
    analysis = ms.update_shared_bindings(1, [b])  # second use: synced already, no wait...
    assert analysis is not None and analysis.slices == {}
    assert analysis.pinned == [b.token]  # ...but stream 2's pools must not lend the slice meanwhile


def test_state() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    ms.resolve(1)
    ms.resolve(2)
    with ms.resolve(1, [binding(1), binding(2), binding(1)]):
        pass
    stream1 = ms.streams.get(1)
    assert stream1.last_synced == {ms.streams.index(2): 1}
    assert stream1.cursor == 2
    stream2 = ms.streams.get(2)
    assert stream2.last_synced == {}
    assert stream2.cursor == 1


def test_cross_stream_binding_waits_on_device_and_pins_until_event() -> None:
    backend = RecordingBackend()
    ms = MultiStream(backend, MAX_STREAMS)
    ms.resolve(2)  # stream 2 did some work
    shared = binding(2, "shared")
    with ms.resolve(1, [shared]) as resolved:
        origin = ms.streams.get(2).stream
        assert origin.ops == ["flush"]
        # stream 1 waits, on the device, for the event of stream 2's flush
        assert resolved.stream.ops == [f"wait:{origin.name}@1"]
    # The binding is pinned: the GC stream waits for stream 1 and the GC thread holds the token.
    gc_stream = ms.streams.get_special(0).stream
    assert gc_stream.ops[0].startswith("wait:")
    ms.gc.drain()
    assert backend.host_waits, "the GC thread waits for the event before releasing"


def test_synced_stream_does_not_wait_again_until_origin_progresses() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    ms.resolve(2)
    b = binding(2)
    with ms.resolve(1, [b]):
        pass
    again = ms.update_shared_bindings(1, [b])
    assert again is not None and again.slices == {}  # already synced with stream 2's cursor: no wait
    with ms.resolve(2, [b]):  # stream 2 writes b in place
        pass
    assert b.token.stream == 2
    after = ms.update_shared_bindings(1, [b])
    assert after is not None and after.slices == {ms.streams.index(2): [b.token]}


def test_pinned_memory_released_after_event() -> None:
    import gc
    import weakref

    release = threading.Event()

    class SlowBackend(RecordingBackend):
        def wait_event_sync(self, event: FakeEvent) -> None:
            release.wait(5)
            super().wait_event_sync(event)

    ms = MultiStream(SlowBackend(), MAX_STREAMS)
    ms.resolve(2)
    b = binding(2)
    ref = weakref.ref(b.token)
    with ms.resolve(1, [b]):
        pass
    del b
    gc.collect()
    assert ref() is not None, "pinned until the event completes"
    release.set()
    ms.gc.drain()
    gc.collect()
    assert ref() is None


def test_memory_pinned_by_an_interrupted_operation_is_held_until_every_stream_synced() -> None:
    import gc
    import weakref

    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    ms.resolve(2)
    b = binding(2)
    ref = weakref.ref(b.token)
    state, analysis = ms.enter(1, [b])  # queued... and interrupted before ms.pin
    assert analysis is not None and analysis.pinned == [b.token]
    del b, state, analysis
    gc.collect()
    assert ref() is not None, "the memory may still be in use by the queued work"
    ms.sync_all()
    gc.collect()
    assert ref() is None and not ms.held


def test_a_pin_hands_the_held_memory_to_the_gc_thread() -> None:
    ms = MultiStream(RecordingBackend(), MAX_STREAMS)
    ms.resolve(2)
    b = binding(2)
    with ms.resolve(1, [b]):
        assert len(ms.held) == 1
    assert not ms.held  # now held by the GC thread until the event completes


def test_stream_pool_slots_wrap() -> None:
    made: list[int] = []
    pool = StreamPool(lambda: made.append(1) or len(made), 4)
    assert pool.get(1) == pool.get(5)
    assert pool.get(2) != pool.get(1)
    assert len(made) == 2


def test_stream_ids_per_thread_and_scoped() -> None:
    main = current_stream_id()
    assert current_stream_id() == main
    seen: list[int] = []
    t = threading.Thread(target=lambda: seen.append(current_stream_id()))
    t.start()
    t.join()
    assert seen[0] != main
    with stream_scope() as inner:
        assert current_stream_id() == inner != main
        with stream_scope() as innermost:
            assert current_stream_id() == innermost
        assert current_stream_id() == inner
    assert current_stream_id() == main
