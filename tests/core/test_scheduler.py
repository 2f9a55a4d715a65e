"""The single-queue scheduler: batching and cross-stream ordering."""

from __future__ import annotations

from dataclasses import dataclass

from cubeplug.core.scheduler import Scheduler


class Token:
    def __init__(self, stream: int) -> None:
        self.stream = stream


@dataclass
class B:
    last: int

    def __post_init__(self) -> None:
        self.token = Token(self.last)

    def memory(self) -> Token:
        return self.token


def make(max_tasks: int = 64) -> tuple[Scheduler, list[list[str]]]:
    batches: list[list[str]] = []
    return Scheduler(batches.append, max_streams=8, max_tasks=max_tasks), batches


def test_tasks_are_batched_per_flush() -> None:
    s, batches = make()
    for i in range(10):
        s.register(1, f"t{i}")
    assert batches == []
    assert s.pending(1) == 10
    s.flush(1)
    assert batches == [[f"t{i}" for i in range(10)]]
    assert s.submissions == 1


def test_full_queue_submits_itself() -> None:
    s, batches = make(max_tasks=3)
    for i in range(7):
        s.register(1, i)
    assert batches == [[0, 1, 2], [3, 4, 5]]
    assert s.pending(1) == 1


def test_with_a_first_batch_batches_double_from_it_after_every_flush() -> None:
    batches: list[list[int]] = []
    s = Scheduler(batches.append, max_streams=8, max_tasks=8, first_batch=2)
    for i in range(30):
        s.register(1, i)
    assert [len(b) for b in batches] == [2, 4, 8, 8, 8] and s.pending(1) == 0
    s.register(2, "other")  # another stream starts at the first batch's length too
    s.register(1, 30)
    s.flush(1)
    s.register(2, "again")
    assert batches[-2:] == [[30], ["other", "again"]]
    for i in range(3):  # the flush started stream 1 over at 2
        s.register(1, i)
    assert batches[-1] == [0, 1] and s.pending(1) == 1
    s.flush_all()
    assert batches[-1] == [2]
    s.register(2, "a")
    s.register(2, "b")  # reset by flush_all although it had nothing queued
    assert batches[-1] == ["a", "b"]


def test_binding_from_another_stream_submits_that_stream_first() -> None:
    s, batches = make()
    s.register(1, "a-write")
    s.register(2, "b-other")
    s.register(2, "b-read-a", [B(1)])
    assert batches == [["a-write"]]  # stream 1 went to the queue before stream 2's read
    s.flush(2)
    assert batches == [["a-write"], ["b-other", "b-read-a"]]


def test_binding_from_own_or_idle_stream_submits_nothing() -> None:
    s, batches = make()
    s.register(2, "x", [B(2), B(3), B(-1)])
    assert batches == []


def test_in_place_write_on_another_stream_is_ordered_before_a_read() -> None:
    s, batches = make()
    shared = B(1)  # allocated on stream 1
    s.register(3, "c-writes-in-place", [shared])
    s.register(2, "b-reads", [shared])  # last user is stream 3, not the allocating stream 1
    assert batches == [["c-writes-in-place"]]
    assert shared.token.stream == 2


def test_flush_all_submits_every_stream_once() -> None:
    s, batches = make()
    s.register(1, "a")
    s.register(3, "c")
    s.flush_all()
    assert sorted(map(tuple, batches)) == [("a",), ("c",)]
    s.flush_all()
    assert len(batches) == 2
