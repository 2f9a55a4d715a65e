"""The single-queue scheduler: batching and cross-stream ordering."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cubeplug.core import scheduler
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


def test_with_a_max_age_a_task_queued_after_it_submits_the_batch(monkeypatch: Any) -> None:
    clock = [100.0]
    monkeypatch.setattr(scheduler, "perf_counter", lambda: clock[0])
    batches: list[list[int]] = []
    s = Scheduler(batches.append, max_streams=8, max_tasks=4, max_age=0.5)
    s.register(1, 0)
    clock[0] += 0.4
    s.register(1, 1)
    s.register(2, 10)  # another stream keeps its own age
    assert batches == []
    clock[0] += 0.2  # stream 1's first task is 0.6 s old: the next task submits
    s.register(1, 2)
    assert batches == [[0, 1, 2]]
    s.register(1, 3)  # the age starts again with the next batch's first task
    clock[0] += 0.35  # stream 2's first task is 0.55 s old, stream 1's 0.35 s
    s.register(2, 11)
    assert batches == [[0, 1, 2], [10, 11]] and s.pending(1) == 1
    for i in range(4, 7):  # max_tasks still submits a young batch
        s.register(1, i)
    assert batches[-1] == [3, 4, 5, 6]


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
    assert s.flush_all() == 2  # the batches it submitted
    assert sorted(map(tuple, batches)) == [("a",), ("c",)]
    assert s.flush_all() == 0
    assert len(batches) == 2
