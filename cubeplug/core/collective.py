"""Collectives across the clients of one process: the driver, and the interface an implementation fills.

Users' guide: docs/devices.md. Each participating client calls the same collective (``all_reduce``,
``broadcast``, ``all_gather``, ``reduce_scatter``) from a thread of its own, naming the same
``devices``; :func:`run` then

1. checks the caller's own arguments (op, dtype, handles, its place in ``devices``), and joins the
   :class:`Group` of that device set (one per backend and device set, kept for the process);
2. waits in a round (:mod:`cubeplug.core.rendezvous`) until every rank arrived, or raises for all
   of them: the calls disagree
   (:class:`~cubeplug.core.errors.CollectiveMismatchError`), a rank failed its own checks
   (:class:`~cubeplug.core.errors.CollectiveAbortedError` for the others), or a rank never came
   (:class:`~cubeplug.core.errors.CollectiveTimeoutError` naming it);
3. the last rank to arrive hands the round to the client's :class:`Collectives`
   (``ComputeServer.new_collectives`` for a backend with its own, e.g. NCCL on cuda; else the
   portable one of :mod:`cubeplug.collectives`): :meth:`Collectives.queue_all` queues every rank's
   part on that rank's stream (NCCL: one ``groupStart``/``groupEnd``) while the others wait, then
   lets them go; an implementation that queues per rank (the portable one) has each rank queue its
   own part on its own thread (:meth:`Collectives.queue`), then waits until every rank queued (a
   rank may overwrite its ``src`` only after the others queued their reads of it). Either way the
   work runs asynchronously, ordered with the client's other work on the caller's stream.

The per-call work is cached: the group and rank of a ``devices`` list (per client, checked by
identity), and the checked :class:`Call` of each (kind, op, dtype, root, argument types); only the
handles are checked at every call.

The core holds no implementation that needs kernels (it cannot import ``lang``): the portable one
installs itself here with :func:`install_portable` when :mod:`cubeplug.collectives` is imported, which
``cubeplug.client`` does when the face first resolves it (docs/architecture.md says why).
"""

from __future__ import annotations

import functools
import weakref
from abc import ABC, abstractmethod
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from cubeplug.core.array import Array
from cubeplug.core.errors import (
    CaptureError,
    CollectiveAbortedError,
    CollectiveMismatchError,
    CollectiveUnavailableError,
    CubeplugError,
    ValidationError,
    describe,
)
from cubeplug.core.handle import Handle
from cubeplug.core.kernel import DTYPES, dtype_of
from cubeplug.core.rendezvous import RENDEZVOUS, Call, Group, Member, Round, size_problem
from cubeplug.core.weak import forget_entry

#: Re-exported: an implementation of :class:`Collectives` works with these.
__all__ = [
    "DEFAULT_TIMEOUT", "KINDS", "OPS", "RENDEZVOUS", "Call", "Collectives", "Group", "Member", "ProcessGroup",
    "Round", "install_portable", "portable", "prepare", "run", "size_problem",
]  # fmt: skip

#: The collectives, and the reductions ``all_reduce`` and ``reduce_scatter`` take.
KINDS = ("all_reduce", "broadcast", "all_gather", "reduce_scatter")
OPS = ("sum", "prod", "min", "max")
#: Seconds a participant waits for the others, unless the call says otherwise.
DEFAULT_TIMEOUT = 120.0




# ---------------------------------------------------------------------------------------- interface
class Collectives(ABC):
    """How one backend moves and reduces the data of a round once every rank arrived.

    :meth:`queue` runs on each participant's own thread, with its member; it queues that rank's part
    on ``member.stream`` of ``member.client`` (the thread's own stream) and returns without waiting
    for the device."""

    #: A short name for messages and the bench (``"portable"``, ``"nccl"``).
    name = "collectives"

    @abstractmethod
    def dtypes(self, client: Any) -> frozenset[str]:
        """The dtypes this implementation reduces and moves on ``client``."""

    @abstractmethod
    def queue(self, group: Group, rnd: Round, member: Member) -> Callable[[], None] | None:
        """Queue ``member``'s reads of the others' data (all of ``rnd.members`` are set and agree).

        May return a function that queues the rest (the writes of ``dst``), which :func:`run` calls
        once every rank queued its reads: a rank's ``dst`` may be its ``src``, which the others read."""

    def queue_all(self, group: Group, rnd: Round) -> bool:
        """Queue every rank's part, each on ``member.stream`` of ``member.client``, from the calling
        thread (the last rank to arrive; the others wait until it returns), with every member's
        client lock held; True once done. False: each rank queues its own part on its own thread
        with :meth:`queue`. Not overriding it means the same, without the last rank taking every
        client lock for it first."""
        return False

    def sync(self, client: Any) -> None:
        """Wait until the collectives the calling thread queued on ``client`` completed."""
        client.sync()


class ProcessGroup(ABC):
    """The participants of a collective across processes (one client each), passed as ``devices``:
    ``client.all_reduce(src, dst, devices=group)`` then runs through the group (e.g.
    :class:`cubeplug.ray.RayGroup`), so that code written for one process runs unchanged."""

    rank: int
    world: int

    @abstractmethod
    def collective(
        self, client: Any, kind: str, src: Any, dst: Any, *, op: str, dtype: Any, root: int, timeout: float
    ) -> None:
        """This process's call of collective ``kind`` on ``client``."""


_portable: Callable[[], Collectives] | None = None


def install_portable(factory: Callable[[], Collectives]) -> None:
    """Make ``factory`` the collectives of clients whose server has none of its own."""
    global _portable
    _portable = factory


def portable() -> Collectives:
    """The portable collectives (:mod:`cubeplug.collectives` installs them when imported)."""
    if _portable is None:
        raise CollectiveUnavailableError(
            "the portable collectives are not loaded: import cubeplug.collectives (cubeplug.client "
            "loads them; a client built another way needs the import)"
        )
    return _portable()


# ---------------------------------------------------------------------------------------- the driver
def run(
    client: Any,
    kind: str,
    src: Any,
    dst: Any,
    *,
    devices: Sequence[Any],
    op: str = "sum",
    dtype: Any = None,
    root: int = 0,
    timeout: float | None = None,
) -> None:
    """One participant's call of collective ``kind`` (the client methods call this)."""
    if client.capturing() is not None:
        # The other ranks' reads and NCCL calls would run now, not at each replay.
        raise CaptureError(
            f"a {kind} inside a capture block: collectives run at once on every rank and cannot be "
            f"replayed; call it between replays"
        )
    timeout = DEFAULT_TIMEOUT if timeout is None else float(timeout)
    if not timeout > 0:
        raise ValidationError(f"timeout must be a positive number of seconds, got {timeout!r}")
    if isinstance(devices, ProcessGroup):  # one client per process: the group's own rendezvous
        devices.collective(client, kind, src, dst, op=op, dtype=dtype, root=root, timeout=timeout)
        return
    seat = _seat(client, devices)
    group, rank = seat.group, seat.rank
    impl: Collectives | None = None
    error: BaseException | None = None
    try:
        impl = client.collectives  # NCCL missing raises here: the other ranks are told
        call = seat.call(client, impl, kind, src, dst, op, dtype, root)
        src_h, dst_h = seat.handles(client, call, src, dst)
        stream = client.stream_id()
    except CubeplugError as exc:  # told to every rank (any other exception is a bug: raised here)
        error = exc
        call, src_h, dst_h, stream = Call(kind, str(op), str(dtype), 0), None, None, -1
    member = Member(rank, client, call, src_h, dst_h, stream, error)  # type: ignore[arg-type]
    rnd, last = group.meet(member, timeout)
    if last:
        if rnd.complete:
            assert impl is not None  # a rank whose own checks failed makes the round incomplete
            # Only an implementation that overrides queue_all gets it called: the base one would
            # return False after the last rank took every client lock for it.
            if type(impl).queue_all is not Collectives.queue_all:
                _queue_all(impl, group, rnd, rank)
        group.release(rnd, member)  # raises for a round that cannot run
    assert impl is not None  # meet or release raised this rank's own error otherwise
    if rnd.done:
        return
    try:
        finish = impl.queue(group, rnd, member)
    except BaseException as exc:
        group.leave(rnd, rank, timeout, exc)
        raise
    group.leave(rnd, rank, timeout)
    if finish is not None:
        finish()


def _queue_all(impl: Collectives, group: Group, rnd: Round, rank: int) -> None:
    """The last rank's :meth:`Collectives.queue_all` for every rank, under every member's client
    lock (taken in server id order, as ``to_client`` takes two): another thread of one of those
    clients may be launching meanwhile."""
    members: list[Member] = rnd.members  # type: ignore[assignment]  # all there: the round is complete
    locks = [m.client.lock for m in sorted(members, key=lambda m: m.client.server.id)]
    for lock in locks:
        lock.acquire()
    try:
        rnd.done = impl.queue_all(group, rnd)
    except BaseException as exc:  # the others' results are not valid; this rank raises its own
        rnd.error = CollectiveAbortedError(
            f"{group.rank_name(rank)} failed while queueing every rank's part of {members[0].call} "
            f"({type(exc).__name__}: {exc}); this rank's result is not valid"
        )
        rnd.meeting.release()
        raise
    finally:
        for lock in reversed(locks):
            lock.release()


class _Seat:
    """A client's place in the group of one ``devices`` list, and the calls it checked there."""

    __slots__ = ("arrays", "calls", "group", "peers", "rank")

    #: A client keeps the seats of this many ``devices`` lists, and a seat the checked handles of
    #: this many Arrays (more: they start again).
    LIMIT = 32

    def __init__(self, group: Group, rank: int) -> None:
        self.group = group
        self.rank = rank
        #: A list of clients: weak references to them, whose callbacks remove the seat from the
        #: client's seats when one of them is collected (see :func:`_seat`).
        self.peers: list[weakref.ref[Any]] = []
        self.calls: dict[tuple[Any, ...], Call] = {}
        #: Arrays already checked (contiguous, of this client: fixed for an Array's life), by id:
        #: (a weak reference that proves it is the same Array and removes the entry when the Array
        #: is collected, item size, its handle).
        self.arrays: dict[int, tuple[weakref.ref[Any], int, Handle]] = {}

    def handles(self, client: Any, call: Call, src: Any, dst: Any) -> tuple[Handle | None, Handle]:
        """:func:`_handles`, with the Arrays checked before only checked for a dropped handle (and
        the None a broadcast's other ranks may pass as ``src`` taken as it is)."""
        arrays = self.arrays
        itemsize = int(DTYPES[call.dtype].itemsize)
        # A broadcast's src=None (another rank's): what _handles gives it, with no Array to look up.
        no_src = src is None and call.kind == "broadcast" and call.root != self.rank
        found = []
        for obj in (dst,) if no_src else (src, dst):
            known = arrays.get(id(obj))
            if known is None or known[0]() is not obj or known[1] != itemsize or known[2].token is None:
                break
            found.append(known[2])
        else:
            return (None, found[0]) if no_src else (found[0], found[1])
        src_h, dst_h = _handles(client, call, src, dst, self.rank)
        if len(arrays) >= self.LIMIT:
            arrays.clear()
        for obj, h in ((src, src_h), (dst, dst_h)):
            if type(obj) is Array and h is not None:
                # The entry goes when the Array does: its handle would keep the memory in use.
                gone = functools.partial(forget_entry, arrays, id(obj))
                arrays[id(obj)] = (weakref.ref(obj, gone), itemsize, h)
        return src_h, dst_h

    def call(
        self, client: Any, impl: Collectives, kind: str, src: Any, dst: Any, op: Any, dtype: Any, root: Any
    ) -> Call:
        """The checked call (cached by kind, op, dtype, root and the arguments' types and dtypes)."""
        try:
            # type(root): True, 1.0 and 1 are equal keys, but only the int is a valid root
            key = (kind, op, dtype, root, type(root), type(src), getattr(src, "dtype", None), type(dst),
                   getattr(dst, "dtype", None))  # fmt: skip
            return self.calls[key]
        except TypeError:  # an unhashable op or dtype: checked (and refused) below
            return _call(client, impl, kind, src, dst, op, dtype, root, self.group.size)
        except KeyError:
            found = self.calls[key] = _call(client, impl, kind, src, dst, op, dtype, root, self.group.size)
            return found


def _seat(client: Any, devices: Sequence[Any]) -> _Seat:
    """The client's seat for ``devices``, cached by the items' keys and types; joined, and
    checked, the first time and again once the group closed (a member's client closed).

    A client's key is its server's id (:func:`_identity`: never reused, so a key always names the
    client it was made for, and no two clients share one, whatever their hash); an index's key is
    its value. The cache holds no peer client: the seat refers to them weakly, and the collection
    of any client of the list removes the seat. Keyed by the clients themselves, a long-lived client
    kept every peer it ever met (with its device memory) until 32 other lists were seen."""
    seats: dict[tuple[Any, ...], _Seat] = client.collective_seats
    try:
        # The items' types too: True and 1 are equal values, but only the int is a device index.
        key: tuple[Any, ...] | None = (*map(_seat_key, devices), *map(type, devices))
        seat = seats.get(key)  # type: ignore[arg-type]
    except (TypeError, AttributeError):  # not a sequence, unhashable items: _join says what is wrong
        key = seat = None
    if seat is not None and not seat.group.closed and not client.closed:
        return seat
    group, rank, by_client = _join(client, devices)
    seat = _Seat(group, rank)
    if key is not None and by_client:
        gone = functools.partial(_forget_seat, weakref.ref(client), key)
        try:
            seat.peers = [weakref.ref(d, gone) for d in devices]
        except TypeError:  # a stand-in for a client that takes no weak reference: not cached
            key = None
    if key is not None:
        if len(seats) >= _Seat.LIMIT:
            seats.clear()
        seats[key] = seat
    return seat


def _seat_key(item: Any) -> Any:
    """A ``devices`` item's part of its seat's key: a client's :func:`_identity`, an index itself."""
    return item if getattr(item, "server", None) is None else _identity(item)


def _forget_seat(client: weakref.ref[Any], key: tuple[Any, ...], _: Any) -> None:
    """A client listed in the seat under ``key`` was collected: the seat (and the group it holds)
    goes from ``client``'s seats."""
    found = client()
    if found is not None:
        found.collective_seats.pop(key, None)


def prepare(
    client: Any, impl: Collectives, kind: str, src: Any, dst: Any, op: Any, dtype: Any, root: Any,
    size: int, rank: int,
) -> tuple[Call, Handle | None, Handle]:  # fmt: skip
    """One rank's checked call and handles (each problem a CollectiveError or ValidationError)."""
    call = _call(client, impl, kind, src, dst, op, dtype, root, size)
    src_h, dst_h = _handles(client, call, src, dst, rank)
    return call, src_h, dst_h


def _call(
    client: Any, impl: Collectives, kind: str, src: Any, dst: Any, op: Any, dtype: Any, root: Any, size: int
) -> Call:
    return Call(kind, _op(kind, op), _dtype(client, impl, src, dst, dtype), _root(kind, root, size))


def _join(client: Any, devices: Sequence[Any]) -> tuple[Group, int, bool]:
    """The group of ``devices``, the caller's rank in it, and whether ``devices`` lists clients
    (else device indices)."""
    if client.closed:
        raise CollectiveAbortedError(
            f"a collective on a closed client ({client.device}): get a new client with cubeplug.client()"
        )
    if isinstance(devices, (str, bytes)) or not isinstance(devices, Sequence) or len(devices) == 0:
        raise CollectiveMismatchError(
            f"devices must be a list of the participating clients (or their device indices), got "
            f"{describe(devices)}"
        )
    items = list(devices)
    by_client = all(hasattr(d, "server") and hasattr(d, "device") for d in items)
    by_index = all(isinstance(d, (int, np.integer)) and not isinstance(d, bool) for d in items)
    if not (by_client or by_index):
        raise CollectiveMismatchError(
            f"devices must be all ComputeClients or all device indices, got {describe(devices)}"
        )
    if by_client:
        keys = [_identity(d) for d in items]
        names = [str(d.device) for d in items]
        for d in items:
            if d.backend != client.backend:
                raise CollectiveMismatchError(
                    f"devices mixes backends ({d.backend} and {client.backend}): a collective runs "
                    f"among clients of one backend; move data between backends with to_client"
                )
            if d.closed:
                raise CollectiveAbortedError(
                    f"devices lists a closed client ({d.device}): get a new one with cubeplug.client()"
                )
        mine = _identity(client)
    else:
        keys = [int(d) for d in items]
        names = [f"{client.backend}:{k}" for k in keys]
        mine = client.device.index
    seen: set[Any] = set()
    for key, name in zip(keys, names):
        if key in seen:
            raise CollectiveMismatchError(
                f"devices lists {name} twice: each participant once (for several clients of one "
                f"device, list the clients themselves)"
            )
        seen.add(key)
    if mine not in keys:
        raise CollectiveMismatchError(
            f"this client ({client.device}) is not among the devices [{', '.join(names)}]: every "
            f"participant calls the collective with the list that includes it"
        )
    group = RENDEZVOUS.group((client.backend, "clients" if by_client else "indices", *keys), names)
    return group, keys.index(mine), by_client


def forget(server_id: int) -> None:
    """Release the groups (and their communicators) of a client that closed (its server's id)."""
    RENDEZVOUS.forget(server_id)


def _identity(client: Any) -> int:
    """A client's key in a group: its server's id (never reused, unlike ``id()``, so a group
    keyed by clients that are gone never answers for new ones)."""
    return int(client.server.id)


def _op(kind: str, op: Any) -> str:
    if kind in ("all_reduce", "reduce_scatter") and op not in OPS:
        raise CollectiveMismatchError(f"op must be one of {', '.join(OPS)}, got {describe(op)}")
    return str(op) if kind in ("all_reduce", "reduce_scatter") else "-"


def _root(kind: str, root: Any, size: int) -> int:
    if kind != "broadcast":
        return 0
    if isinstance(root, bool) or not isinstance(root, (int, np.integer)) or not 0 <= root < size:
        raise CollectiveMismatchError(f"root must be a rank from 0 to {size - 1}, got {describe(root)}")
    return int(root)


def _dtype(client: Any, impl: Collectives, src: Any, dst: Any, dtype: Any) -> str:
    """The element type: ``dtype``, or the Arrays' own (which must agree with it)."""
    found = {dtype_of(a.dtype) for a in (src, dst) if hasattr(a, "dtype") and hasattr(a, "handle")}
    if dtype is not None:
        try:
            name = dtype_of(dtype)
        except (ValidationError, TypeError, KeyError) as exc:
            raise CollectiveMismatchError(f"dtype: {exc}") from exc
        if found and {name} != found:
            raise CollectiveMismatchError(
                f"dtype={name} but the arrays are {', '.join(sorted(found))}: leave dtype out for arrays"
            )
    elif len(found) == 1:
        name = found.pop()
    else:
        raise CollectiveMismatchError(
            "a collective needs the element type: pass cubeplug.Arrays of one dtype, or dtype= with "
            "handles (handles are untyped bytes)"
            if not found else f"src and dst are arrays of different dtypes ({', '.join(sorted(found))})"
        )
    allowed = impl.dtypes(client)
    if not allowed:
        raise CollectiveUnavailableError(
            f"the {impl.name} collectives cannot run on this {client.backend} client: it compiles no "
            f"kernel dialect they generate (cubeplug.lang's c, wgsl, python); its backend needs "
            f"collectives of its own (ComputeServer.new_collectives)"
        )
    if name not in allowed:
        raise CollectiveMismatchError(
            f"the {impl.name} collectives of {client.backend} do not take {name}; they take "
            f"{', '.join(sorted(allowed))}"
        )
    return name


def _handles(
    client: Any, call: Call, src: Any, dst: Any, rank: int
) -> tuple[Handle | None, Handle]:
    """The handles of ``src`` and ``dst`` (Arrays must be contiguous), checked against the client."""
    itemsize = int(DTYPES[call.dtype].itemsize)
    if call.kind == "broadcast" and rank != call.root and src is None:
        src_h = None
    else:
        src_h = _handle(client, src, "src", itemsize)
    return src_h, _handle(client, dst, "dst", itemsize)


def _handle(client: Any, obj: Any, what: str, itemsize: int) -> Handle:
    """The checked handle of ``obj`` (an Array of ``client``, contiguous, or a Handle)."""
    if hasattr(obj, "handle") and hasattr(obj, "is_contiguous"):
        if not obj.is_contiguous:
            raise ValidationError(f"{what} is a strided array view: pass a contiguous copy (.copy())")
        if obj.client is not client:
            raise ValidationError(f"{what} is an array of another client ({obj.client.device})")
        obj = obj.handle
    checked: Handle = client.server.check_handle(obj, what)
    if checked.size % itemsize:
        raise ValidationError(
            f"{what} holds {checked.size} B, not a whole number of {itemsize}-byte elements"
        )
    return checked
