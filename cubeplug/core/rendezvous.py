"""The rendezvous of in-process collectives: each participant's call, the rounds of a device set.

A :class:`Group` is the participants of one device set of one backend (kept in :data:`RENDEZVOUS`
for the process); its collectives run one :class:`Round` at a time. :meth:`Group.meet` waits until
every rank arrived; the last rank to come judges the round once for all of them (disagreement, a
rank's own failure, the sizes), queues what it can for every rank, and lets the others go
(:meth:`Group.release`); :meth:`Group.leave` is the per-rank path's second wait, until every rank
queued its part. Each wait is a :class:`Phase`: one held lock per waiting rank, released once by
whoever closes it. The driver that uses them is :mod:`cubeplug.core.collective`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cubeplug.core.errors import (
    CollectiveAbortedError,
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
)
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES


@dataclass(frozen=True)
class Call:
    """What every participant of one round must agree on."""

    kind: str
    op: str
    dtype: str
    root: int

    def __str__(self) -> str:
        op = f", op={self.op!r}" if self.kind in ("all_reduce", "reduce_scatter") else ""
        root = f", root={self.root}" if self.kind == "broadcast" else ""
        return f"{self.kind}(dtype={self.dtype}{op}{root})"


@dataclass
class Member:
    """One participant's side of a round: its client, rank, handles and stream."""

    rank: int
    client: Any  # a ComputeClient (the core's client module imports this one)
    call: Call
    src: Handle | None
    dst: Handle
    #: The server stream id of the calling thread: where the collective's work on this client goes.
    stream: int
    error: BaseException | None = None

    @property
    def itemsize(self) -> int:
        return int(DTYPES[self.call.dtype].itemsize)


class Phase:
    """One wait of a round (the arrival, or the queueing of the parts): every rank comes once, and
    whoever closes the phase (the last rank to come, or a rank that timed out) releases every rank
    waiting in it, exactly once each.

    Each waiting rank waits on a lock of its own, made for this phase and released by the closer:
    one futex wake per waiter, where a ``threading.Condition`` costs a waiter lock allocated per wait
    plus a ``notify_all`` that wakes every rank to recheck (on 2 x H200 the rendezvous on a
    Condition, twice per call, was most of the 115 us a 4 KiB all_reduce spent above the raw NCCL
    call: docs/devices.md)."""

    __slots__ = ("came", "closed", "error", "gates")

    def __init__(self, size: int) -> None:
        self.came = [False] * size
        self.gates: list[Any] = [None] * size
        self.closed = False
        self.error: CollectiveError | None = None

    def release(self) -> None:
        """Let every waiting rank go (once the phase is closed, by its closer only)."""
        for gate in self.gates:
            if gate is not None:
                gate.release()


class Round:
    """One collective of a group: the members as they arrive, then the verdict."""

    __slots__ = ("arrived", "complete", "done", "error", "failed", "meeting", "members", "queueing")

    def __init__(self, size: int) -> None:
        self.members: list[Member | None] = [None] * size
        self.arrived = 0
        self.complete = False
        #: True once the last rank queued every rank's part (``Collectives.queue_all``).
        self.done = False
        self.error: CollectiveError | None = None
        self.failed: dict[int, BaseException] = {}
        self.meeting = Phase(size)
        #: The second wait of the per-rank path (made by the first rank that needs it).
        self.queueing: Phase | None = None

    def missing(self) -> list[int]:
        return [r for r, m in enumerate(self.members) if m is None]


class Group:
    """The participants of one device set of one backend; their collectives run one round at a time.

    ``state`` keeps what an implementation makes once per device set (NCCL's communicators), under
    ``lock``."""

    def __init__(self, key: tuple[Any, ...], size: int, names: Sequence[str]) -> None:
        self.key = key
        self.size = size
        self.names = tuple(names)
        #: Guards ``round`` and the phases' bookkeeping (held for a few lines, never while waiting).
        self.mutex = threading.Lock()
        self.round = Round(size)
        self.lock = threading.Lock()
        self.state: dict[str, Any] = {}
        #: What releases ``state`` (an implementation's communicators): called once by :meth:`close`.
        self.closers: list[Callable[[], None]] = []
        #: True once :meth:`close` ran (a member's client closed): the group never meets again.
        self.closed = False

    def close(self) -> None:
        """Release what the implementations made for this device set (a member's client closed)."""
        with self.lock:
            self.closed = True
            closers, self.closers = self.closers, []
            self.state.clear()
        for close in closers:
            close()

    def rank_name(self, rank: int) -> str:
        return f"rank {rank} ({self.names[rank]})"

    # ------------------------------------------------------------------ arrival
    def meet(self, member: Member, timeout: float) -> tuple[Round, bool]:
        """Join the current round and wait for every rank: (the round, whether this rank came last).

        The last rank judges the round and returns at once, the others still waiting: it queues
        what it can for every rank (``Collectives.queue_all``), then lets them go with
        :meth:`release`. A waiting rank returns once released; when the round cannot run every rank
        raises (its own error first), the last one from :meth:`release`."""
        deadline = time.monotonic() + timeout
        rank = member.rank
        with self.mutex:
            rnd = self.round
            if rnd.members[rank] is not None:
                raise CollectiveMismatchError(
                    f"{self.rank_name(rank)} is already waiting in a {rnd.members[rank].call}"  # type: ignore[union-attr]
                    f" of this device set: call a collective once per participant, each from its own "
                    f"thread, and the next one after it returned"
                )
            rnd.members[rank] = member
            rnd.arrived += 1
            phase = rnd.meeting
            if rnd.arrived == self.size:
                self.round = Round(self.size)  # the next collective starts a round of its own
                phase.closed = True
                gate = None
            else:
                gate = phase.gates[rank] = _gate()
        if gate is None:
            self._judge(rnd)  # the round is closed: no other thread touches its verdict now
            return rnd, True
        self._wait(phase, gate, deadline, timeout, lambda: self._never_came(rnd, member.call, timeout))
        _raise(member, rnd)
        return rnd, False

    def release(self, rnd: Round, member: Member) -> None:
        """The last rank's end of :meth:`meet`: let the others go, then raise if the round failed."""
        rnd.meeting.release()
        _raise(member, rnd)

    def _never_came(self, rnd: Round, call: Call, timeout: float) -> CollectiveError:
        """The error of a round a rank gave up on (called with ``mutex`` held)."""
        if self.round is rnd:
            self.round = Round(self.size)  # a rank that comes later starts a round of its own
        missing = ", ".join(self.rank_name(r) for r in rnd.missing())
        rnd.error = CollectiveTimeoutError(
            f"{call} on {self._label()}: {missing} never arrived within {timeout:g} s; every "
            f"participant must call it (one thread per client, the same devices), or pass a larger "
            f"timeout="
        )
        return rnd.error

    def _wait(
        self,
        phase: Phase,
        gate: Any,
        deadline: float,
        timeout: float,
        timed_out: Callable[[], CollectiveError],
    ) -> None:
        """Wait on ``gate`` until the phase's closer releases it, or close the phase at the deadline
        with ``timed_out()`` (called under ``mutex``) as every waiter's error. A phase closed by its
        last rank, which is still queueing every rank's part at the deadline, gets ``timeout``
        seconds more (then this rank raises: never a silent hang behind a blocked queueing)."""
        if gate.acquire(timeout=max(0.0, deadline - time.monotonic())):
            return
        with self.mutex:
            closing = not phase.closed
            if closing:
                phase.closed = True
                phase.error = timed_out()
                phase.gates[phase.gates.index(gate)] = None  # this rank waits no more
        if closing:
            phase.release()
        elif not gate.acquire(timeout=timeout):  # the closer releases it once it queued every part
            raise CollectiveTimeoutError(
                f"{self._label()}: the rank that came last did not finish queueing the collective's "
                f"parts within {timeout:g} s more (its thread is blocked?); this rank's result is not valid"
            )

    def _judge(self, rnd: Round) -> None:
        """Every rank arrived: decide whether the round runs (by the last rank, once)."""
        members: list[Member] = rnd.members  # type: ignore[assignment]  # every rank is there
        first = members[0]
        failed = {m.rank: m.error for m in members if m.error is not None}
        if failed:
            rnd.failed = failed
            rank, error = next(iter(failed.items()))
            rnd.error = CollectiveAbortedError(
                f"{first.call} on {self._label()} was abandoned: {self.rank_name(rank)} failed "
                f"({type(error).__name__}: {error}); the other participants' clients are unaffected"
            )
            return
        call = first.call  # the same object on every rank, mostly (each client caches its calls)
        if any(m.call is not call and m.call != call for m in members):
            each = "; ".join(f"{self.rank_name(m.rank)}: {m.call}" for m in members)
            rnd.error = CollectiveMismatchError(
                f"the participants of one collective on {self._label()} disagree ({each}): every rank "
                f"must call the same collective with the same op, dtype and root"
            )
            return
        problem = _size_problem(members, self.size)
        if problem is not None:
            rnd.error = CollectiveMismatchError(f"{call} on {self._label()}: {problem}")
            return
        rnd.complete = True

    # ------------------------------------------------------------------ departure
    def leave(self, rnd: Round, rank: int, timeout: float, error: BaseException | None = None) -> None:
        """The per-rank path's second wait: until every rank queued its part of ``rnd`` (or raise,
        naming the ranks that did not)."""
        deadline = time.monotonic() + timeout
        with self.mutex:
            phase = rnd.queueing
            if phase is None:
                phase = rnd.queueing = Phase(self.size)
            if error is not None:
                rnd.failed[rank] = error
            phase.came[rank] = True
            late = phase.closed  # the others' wait already ended (timed out): nothing to wait for
            last = all(phase.came)
            if last and not late:
                phase.closed = True
                gate = None
            elif not late:
                gate = phase.gates[rank] = _gate()
        if late:
            assert phase.error is not None  # a phase closed before its last rank came timed out
            raise phase.error
        if gate is None:
            phase.release()
        else:
            self._wait(phase, gate, deadline, timeout, lambda: self._never_queued(phase, timeout))
        if phase.error is not None:
            raise phase.error
        broken = {r: e for r, e in rnd.failed.items() if r != rank}
        if error is None and broken:
            r, e = next(iter(broken.items()))
            raise CollectiveAbortedError(
                f"{self.rank_name(r)} failed while queueing its part ({type(e).__name__}: {e}); this "
                f"rank's result is not valid"
            )

    def _never_queued(self, phase: Phase, timeout: float) -> CollectiveError:
        late = ", ".join(self.rank_name(r) for r, came in enumerate(phase.came) if not came)
        return CollectiveTimeoutError(
            f"{self._label()}: {late} did not queue its part of the collective within {timeout:g} s "
            f"(its thread is blocked?)"
        )

    def _label(self) -> str:
        return f"{self.key[0]} devices [{', '.join(self.names)}]"


def _gate() -> Any:
    """A lock that is held: a waiting rank blocks on it until the phase's closer releases it."""
    gate = threading.Lock()
    gate.acquire()
    return gate


def _raise(member: Member, rnd: Round) -> None:
    """A rank's end of a round that cannot run: its own error first (also when the others never
    came), else the round's."""
    if member.error is not None:
        raise member.error
    if rnd.error is not None:
        raise rnd.error


def _size_problem(members: list[Member], size: int) -> str | None:
    itemsize = members[0].itemsize  # one call: one dtype
    return size_problem(
        members[0].call,
        [(0 if m.src is None else m.src.size // itemsize, m.dst.size // itemsize) for m in members],
    )


def size_problem(call: Call, counts: Sequence[tuple[int, int]]) -> str | None:
    """Why the element counts (src, dst) of each rank do not fit ``call``, or None."""
    kind, size = call.kind, len(counts)
    if kind == "all_reduce":
        ok = all(s == d == counts[0][0] for s, d in counts)
        rule = "src and dst of the same element count on every rank"
    elif kind == "broadcast":
        root = call.root
        ok = all(d == counts[0][1] for _, d in counts) and counts[root][0] == counts[root][1]
        rule = f"dst of the same count everywhere, and the root's (rank {root}) src of that count"
    elif kind == "all_gather":
        ok = all(d == size * s and s == counts[0][0] for s, d in counts)
        rule = f"src of the same count everywhere, dst {size} times that"
    else:
        ok = all(s == size * d and d == counts[0][1] for s, d in counts)
        rule = f"dst of the same count everywhere, src {size} times that"
    if ok:
        return None
    listing = ", ".join(f"rank {r}: src {s}, dst {d}" for r, (s, d) in enumerate(counts))
    return f"the element counts do not fit ({listing}); it needs {rule}"


class Rendezvous:
    """Every group of the process, one per (backend, device set)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._groups: dict[tuple[Any, ...], Group] = {}

    def group(self, key: tuple[Any, ...], names: Sequence[str]) -> Group:
        with self._lock:
            found = self._groups.get(key)
            if found is None:
                found = self._groups[key] = Group(key, len(names), names)
            return found

    def forget(self, identity: int) -> None:
        """Drop and close every group of clients that ``identity`` (a closed client's server id)
        belonged to: such a group can never meet again (ids are not reused), and its NCCL
        communicators hold device memory. Groups keyed by device indices are kept: a new client of
        the same devices uses them."""
        with self._lock:
            keys = [k for k in self._groups if k[1] == "clients" and identity in k[2:]]
            gone = [self._groups.pop(k) for k in keys]
        for group in gone:
            group.close()


RENDEZVOUS = Rendezvous()
