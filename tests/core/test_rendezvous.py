"""The rendezvous of in-process collectives on its own: the phases' hand-offs, timeouts that name the
missing ranks and release the others, late ranks that start a round of their own, and the second
wait of the per-rank path. The collectives over it run in the conformance suite (TestCollectives)."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace
from typing import Any

import pytest

from cubeplug.core.errors import CollectiveAbortedError, CollectiveMismatchError, CollectiveTimeoutError
from cubeplug.core.rendezvous import Call, Group, Member

CALL = Call("all_reduce", "sum", "f32", 0)


def member(rank: int, call: Call = CALL, nbytes: int = 16, error: BaseException | None = None) -> Member:
    buf: Any = SimpleNamespace(size=nbytes)
    return Member(rank, None, call, buf, buf, 0, error)


def arrived(group: Group, rank: int) -> None:
    """Wait until ``rank`` waits in the group's round (a sleep could let another rank come first
    on a loaded machine)."""
    deadline = time.monotonic() + 10
    while group.round.members[rank] is None:
        assert time.monotonic() < deadline, f"rank {rank} never arrived"
        time.sleep(0.001)


def meet_all(group: Group, members: list[Member], timeout: float = 10.0) -> list[Any]:
    """Every member's meet on a thread of its own; each result ("last"/"waited", or the exception).
    The last rank releases the others, as the driver does."""
    out: list[Any] = [None] * len(members)

    def run(i: int, m: Member) -> None:
        try:
            rnd, last = group.meet(m, timeout)
            if last:
                group.release(rnd, m)
            out[i] = "last" if last else "waited"
        except BaseException as exc:
            out[i] = exc

    threads = [threading.Thread(target=run, args=(i, m)) for i, m in enumerate(members)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    return out


def test_one_rank_comes_last_and_the_others_wait_for_it() -> None:
    group = Group(("cpu", "t"), 3, ["a", "b", "c"])
    for _ in range(20):  # rounds follow one another on the same group
        out = meet_all(group, [member(r) for r in range(3)])
        assert sorted(out) == ["last", "waited", "waited"], out


def test_the_last_rank_queues_before_the_others_go() -> None:
    group = Group(("cpu", "t"), 2, ["a", "b"])
    seen: list[str] = []
    first = member(0)
    waiter = threading.Thread(target=lambda: (group.meet(first, 10), seen.append("released")))
    waiter.start()
    arrived(group, 0)
    rnd, last = group.meet(member(1), 10)
    assert last and rnd.complete
    time.sleep(0.05)
    seen.append("queued")  # what queue_all does, while rank 0 still waits
    group.release(rnd, rnd.members[1])  # type: ignore[arg-type]
    waiter.join(10)
    assert seen == ["queued", "released"]


def test_a_missing_rank_is_named_and_every_waiter_is_released() -> None:
    group = Group(("cpu", "t"), 3, ["a", "b", "c"])
    start = time.monotonic()
    out = meet_all(group, [member(0), member(1)], timeout=0.3)
    assert time.monotonic() - start < 5
    for exc in out:
        assert isinstance(exc, CollectiveTimeoutError), exc
        assert "rank 2 (c) never arrived within 0.3 s" in str(exc)
    # The missing rank comes late: it starts a round of its own (and waits for the others).
    late = meet_all(group, [member(2)], timeout=0.2)
    assert isinstance(late[0], CollectiveTimeoutError) and "rank 0 (a), rank 1 (b)" in str(late[0])
    assert sorted(meet_all(group, [member(r) for r in range(3)])) == ["last", "waited", "waited"]


def test_disagreement_and_a_failed_rank_raise_on_every_rank() -> None:
    group = Group(("cpu", "t"), 2, ["a", "b"])
    out = meet_all(group, [member(0), member(1, Call("all_reduce", "max", "f32", 0))])
    assert all(isinstance(e, CollectiveMismatchError) and "disagree" in str(e) for e in out), out
    out = meet_all(group, [member(0), member(1, nbytes=8)])
    assert all(isinstance(e, CollectiveMismatchError) and "element counts" in str(e) for e in out), out
    own = ValueError("bad handle")
    out = meet_all(group, [member(0), member(1, error=own)])
    assert out[1] is own and isinstance(out[0], CollectiveAbortedError) and "rank 1 (b) failed" in str(out[0])


def test_a_rank_called_twice_in_one_round() -> None:
    group = Group(("cpu", "t"), 2, ["a", "b"])
    waiter = threading.Thread(target=lambda: meet_all(group, [member(0)], timeout=0.5))
    waiter.start()
    arrived(group, 0)
    with pytest.raises(CollectiveMismatchError, match="already waiting"):
        group.meet(member(0), 1)
    waiter.join(10)


def test_the_second_wait_names_the_rank_that_never_queued() -> None:
    group = Group(("cpu", "t"), 2, ["a", "b"])
    results: list[Any] = []

    def run(m: Member) -> None:
        rnd, last = group.meet(m, 10)
        if last:
            group.release(rnd, m)
        try:
            if m.rank == 0:
                group.leave(rnd, 0, 0.3)
            results.append("left")
        except BaseException as exc:
            results.append(exc)

    threads = [threading.Thread(target=run, args=(member(r),)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    errors = [r for r in results if r != "left"]
    assert len(errors) == 1 and isinstance(errors[0], CollectiveTimeoutError), results
    assert "rank 1 (b) did not queue its part" in str(errors[0])


def test_a_rank_leaving_after_the_others_timed_out_raises_at_once() -> None:
    """Ranks 0 and 1 time out in the second wait (ranks 2 and 3 missing); rank 2 comes later: it
    gets their error at once, not after a timeout of its own and a second one."""
    group = Group(("cpu", "t"), 4, ["a", "b", "c", "d"])
    met = threading.Barrier(4)
    results: list[Any] = [None] * 4

    def run(m: Member) -> None:
        rnd, last = group.meet(m, 10)
        if last:
            group.release(rnd, m)
        met.wait()
        if m.rank == 3:
            return  # never leaves
        if m.rank == 2:
            time.sleep(0.6)  # the others' 0.2 s wait is over
        t0 = time.monotonic()
        try:
            group.leave(rnd, m.rank, 0.2 if m.rank < 2 else 3.0)
            results[m.rank] = "left"
        except BaseException as exc:
            results[m.rank] = (exc, time.monotonic() - t0)

    threads = [threading.Thread(target=run, args=(member(r),)) for r in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(20)
    for r in range(3):
        exc, _ = results[r]
        assert isinstance(exc, CollectiveTimeoutError), results
        assert "rank 3 (d)" in str(exc), exc
    assert results[2][1] < 1.0, results  # before: 2 x 3 s, then a wrong message


def test_a_rank_that_failed_to_queue_aborts_the_others() -> None:
    group = Group(("cpu", "t"), 2, ["a", "b"])
    results: dict[int, Any] = {}

    def run(m: Member) -> None:
        rnd, last = group.meet(m, 10)
        if last:
            group.release(rnd, m)
        try:
            group.leave(rnd, m.rank, 10, RuntimeError("no memory") if m.rank == 1 else None)
            results[m.rank] = "left"
        except BaseException as exc:
            results[m.rank] = exc

    threads = [threading.Thread(target=run, args=(member(r),)) for r in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    assert results[1] == "left"  # its own error is raised by its caller
    assert isinstance(results[0], CollectiveAbortedError)
    assert "rank 1 (b) failed while queueing" in str(results[0])


def test_a_last_rank_blocked_while_queueing_is_not_waited_for_forever() -> None:
    group = Group(("cpu", "t"), 2, ["a", "b"])
    out: list[Any] = []

    def first() -> None:
        try:
            group.meet(member(0), 0.2)
            out.append("released")
        except BaseException as exc:
            out.append(exc)

    waiter = threading.Thread(target=first)
    waiter.start()
    arrived(group, 0)
    rnd, last = group.meet(member(1), 10)  # came last: "queues" for 1 s, past rank 0's 0.2 + 0.2 s
    assert last
    waiter.join(0.8)
    assert len(out) == 1 and isinstance(out[0], CollectiveTimeoutError), out
    assert "did not finish queueing" in str(out[0])
    group.release(rnd, rnd.members[1])  # type: ignore[arg-type]  # late: releases nobody, raises nothing
    assert sorted(meet_all(group, [member(0), member(1)])) == ["last", "waited"]  # the next round runs
