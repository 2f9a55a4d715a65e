"""The rendezvous of in-process collectives: each participant's call, the rounds of a device set.

A :class:`Group` is the participants of one device set of one backend (kept in :data:`RENDEZVOUS`
for the process); its collectives run one :class:`Round` at a time. :meth:`Group.meet` waits until
every rank arrived, then judges the round once for all of them (disagreement, a rank's own failure,
the sizes); :meth:`Group.leave` waits until every rank queued its part. The driver that uses them is
:mod:`cubeplug.core.collective`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
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

    def count(self, handle: Handle | None) -> int:
        """Elements of ``handle`` (0 for None)."""
        return 0 if handle is None else handle.size // self.itemsize


@dataclass
class Round:
    """One collective of a group: the members as they arrive, then the verdict."""

    size: int
    members: list[Member | None] = field(default_factory=list)
    complete: bool = False
    error: CollectiveError | None = None
    failed: dict[int, BaseException] = field(default_factory=dict)
    queued: set[int] = field(default_factory=set)

    def __post_init__(self) -> None:
        self.members = [None] * self.size

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
        self.cond = threading.Condition()
        self.round = Round(size)
        self.lock = threading.Lock()
        self.state: dict[str, Any] = {}
        #: What releases ``state`` (an implementation's communicators): called once by :meth:`close`.
        self.closers: list[Callable[[], None]] = []

    def close(self) -> None:
        """Release what the implementations made for this device set (a member's client closed)."""
        with self.lock:
            closers, self.closers = self.closers, []
            self.state.clear()
        for close in closers:
            close()

    def rank_name(self, rank: int) -> str:
        return f"rank {rank} ({self.names[rank]})"

    # ------------------------------------------------------------------ arrival
    def meet(self, member: Member, timeout: float) -> Round:
        """Join the current round and wait for every rank; raise for every rank if it cannot run."""
        deadline = time.monotonic() + timeout
        with self.cond:
            rnd = self.round
            if rnd.members[member.rank] is not None:
                raise CollectiveMismatchError(
                    f"{self.rank_name(member.rank)} is already waiting in a {rnd.members[member.rank].call}"  # type: ignore[union-attr]
                    f" of this device set: call a collective once per participant, each from its own "
                    f"thread, and the next one after it returned"
                )
            rnd.members[member.rank] = member
            if not rnd.missing():
                self._judge(rnd)
                self.round = Round(self.size)  # the next collective starts a round of its own
                self.cond.notify_all()
            while not rnd.complete and rnd.error is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    missing = ", ".join(self.rank_name(r) for r in rnd.missing())
                    rnd.error = CollectiveTimeoutError(
                        f"{member.call} on {self._label()}: {missing} never arrived within {timeout:g} s; "
                        f"every participant must call it (one thread per client, the same devices), or "
                        f"pass a larger timeout="
                    )
                    if self.round is rnd:
                        self.round = Round(self.size)
                    self.cond.notify_all()
                    break
                self.cond.wait(left)
        if member.error is not None:  # its own error first, also when the others never came
            raise member.error
        if rnd.error is not None:
            raise rnd.error
        return rnd

    def _judge(self, rnd: Round) -> None:
        """Every rank arrived: decide whether the round runs (called under the condition)."""
        members = [m for m in rnd.members if m is not None]
        failed = {m.rank: m.error for m in members if m.error is not None}
        if failed:
            rnd.failed = failed
            rank, error = next(iter(failed.items()))
            rnd.error = CollectiveAbortedError(
                f"{members[0].call} on {self._label()} was abandoned: {self.rank_name(rank)} failed "
                f"({type(error).__name__}: {error}); the other participants' clients are unaffected"
            )
            return
        calls = {m.call for m in members}
        if len(calls) > 1:
            each = "; ".join(f"{self.rank_name(m.rank)}: {m.call}" for m in members)
            rnd.error = CollectiveMismatchError(
                f"the participants of one collective on {self._label()} disagree ({each}): every rank "
                f"must call the same collective with the same op, dtype and root"
            )
            return
        problem = _size_problem(members, self.size)
        if problem is not None:
            rnd.error = CollectiveMismatchError(f"{members[0].call} on {self._label()}: {problem}")
            return
        rnd.complete = True

    # ------------------------------------------------------------------ departure
    def leave(self, rnd: Round, rank: int, timeout: float, error: BaseException | None = None) -> None:
        """Wait until every rank queued its part of ``rnd`` (or raise, naming the rank that did not)."""
        deadline = time.monotonic() + timeout
        with self.cond:
            if error is not None:
                rnd.failed[rank] = error
            rnd.queued.add(rank)
            self.cond.notify_all()
            while len(rnd.queued) < self.size:
                left = deadline - time.monotonic()
                if left <= 0:
                    late = ", ".join(self.rank_name(r) for r in range(self.size) if r not in rnd.queued)
                    raise CollectiveTimeoutError(
                        f"{self._label()}: {late} did not queue its part of the collective within "
                        f"{timeout:g} s (its thread is blocked?)"
                    )
                self.cond.wait(left)
            broken = {r: e for r, e in rnd.failed.items() if r != rank}
        if error is None and broken:
            r, e = next(iter(broken.items()))
            raise CollectiveAbortedError(
                f"{self.rank_name(r)} failed while queueing its part ({type(e).__name__}: {e}); this "
                f"rank's result is not valid"
            )

    def _label(self) -> str:
        return f"{self.key[0]} devices [{', '.join(self.names)}]"


def _size_problem(members: list[Member], size: int) -> str | None:
    return size_problem(members[0].call, [(m.count(m.src), m.count(m.dst)) for m in members])


def size_problem(call: Call, counts: Sequence[tuple[int, int]]) -> str | None:
    """Why the element counts (src, dst) of each rank do not fit ``call``, or None."""
    kind, size = call.kind, len(counts)
    listing = ", ".join(f"rank {r}: src {s}, dst {d}" for r, (s, d) in enumerate(counts))
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
    return None if ok else f"the element counts do not fit ({listing}); it needs {rule}"


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
