"""Collectives across processes and hosts on Ray: one cubeplug client per Ray actor (``cubeplug[ray]``).

Users' guide: docs/devices.md. Ray starts, places and connects the processes; cubeplug adds nothing
of its own but a rendezvous actor (:class:`Rendezvous`, which exchanges the small facts of each
collective, and the data of the host path, through Ray's own object transfer)::

    import ray, cubeplug.ray

    def work(rank, client, peers, n):            # the same function runs on threads in one process
        x = client.asarray(numpy.full(n, rank + 1.0, numpy.float32))
        client.all_reduce(x, x, devices=peers)   # peers: the clients, or the Ray group
        return x.numpy()

    ray.init()                                   # an existing cluster: ray.init(address="auto")
    workers = cubeplug.ray.Workers(2, "cpu")     # "cuda" with num_gpus=1: one GPU per actor
    results = workers.run(work, 1000)
    workers.shutdown()

In an actor, ``peers`` is a :class:`RayGroup`, a :class:`~cubeplug.core.collective.ProcessGroup`:
``client.all_reduce(src, dst, devices=peers)`` (and ``broadcast``, ``all_gather``,
``reduce_scatter``) runs across the actors with the same checks and errors as in one process. On cuda
with NCCL it is NCCL: rank 0 makes the unique id, Ray hands it to the others, each process joins
its communicator once, and every call runs on the client's stream. Elsewhere it is the host path:
each rank reads its ``src``, the rendezvous hands every rank the others' bytes, each reduces them in
rank order with numpy (the same bits everywhere) and writes its ``dst``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import ray

import cubeplug.collectives  # noqa: F401 - installs the portable collectives in the actors
from cubeplug.core.collective import Call, Collectives, ProcessGroup, prepare, size_problem
from cubeplug.core.errors import (
    CollectiveAbortedError,
    CollectiveError,
    CollectiveMismatchError,
    CollectiveTimeoutError,
    CubeplugError,
    ValidationError,
)
from cubeplug.core.kernel import DTYPES
from cubeplug.registry.selection import client as make_client

__all__ = ["RayGroup", "Rendezvous", "Workers"]

_REDUCE = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


@ray.remote(num_cpus=0)
class Rendezvous:
    """Where the ranks of one group meet: each round, every rank hands in a value and gets all of them.

    Rounds follow one another as in one process (:class:`~cubeplug.core.collective.Group`): a rank
    joins the open round; a round that times out is dropped, so a rank that never came does not
    shift the rounds of the others."""

    def __init__(self, world: int) -> None:
        self.world = world
        self.open: tuple[dict[int, Any], asyncio.Event] | None = None

    async def exchange(self, rank: int, value: Any, timeout: float) -> tuple[str, Any]:
        """("ok", every rank's value in rank order), or ("timeout", the ranks that never came)."""
        if self.open is None or rank in self.open[0]:
            self.open = ({}, asyncio.Event())
        rnd = self.open
        values, done = rnd
        values[rank] = value
        if len(values) == self.world:
            done.set()
            self.open = None
        try:
            await asyncio.wait_for(done.wait(), timeout)
        except asyncio.TimeoutError:
            if self.open is rnd:
                self.open = None
            return "timeout", [r for r in range(self.world) if r not in values]
        return "ok", [values[r] for r in range(self.world)]


class RayGroup(ProcessGroup):
    """This actor's place in a group of ``world`` actors (``devices=`` of the client's collectives)."""

    def __init__(self, rank: int, world: int, rendezvous: Any) -> None:
        self.rank = rank
        self.world = world
        self._rendezvous = rendezvous
        self._comm: Any = None

    def collective(
        self, client: Any, kind: str, src: Any, dst: Any, *, op: str, dtype: Any, root: int, timeout: float
    ) -> None:
        impl: Collectives | None = None
        nccl = False
        error: BaseException | None = None
        facts: Any = None
        data: bytes | None = None
        try:
            impl = client.collectives  # NCCL missing raises here: the other actors are told
            nccl = hasattr(impl, "communicator")
            call, src_h, dst_h = prepare(client, impl, kind, src, dst, op, dtype, root, self.world, self.rank)
            itemsize = int(DTYPES[call.dtype].itemsize)
            counts = (0 if src_h is None else src_h.size // itemsize, dst_h.size // itemsize)
            facts = (call, counts)
            if not nccl and src_h is not None and (kind != "broadcast" or self.rank == call.root):
                data = client.read_one(src_h)  # after the work queued before the collective
        except CubeplugError as exc:  # told to every actor (a read's LaunchError too)
            error = exc
        every = self._exchange((facts, repr(error) if error else None, data), timeout)
        if error is not None:
            raise error
        assert impl is not None
        self._check([e[0] for e in every], [e[1] for e in every])
        if nccl:
            comm = self._communicator(impl, timeout)
            stream = client.stream_id()
            with client.lock:  # as a launch: other threads of this client may be queueing too
                impl.enqueue(comm, call, src_h, dst_h, stream, self.world)  # type: ignore[attr-defined]
            return
        client.write(dst_h, _host_result(call, [e[2] for e in every], self.rank))

    def _exchange(self, value: Any, timeout: float) -> list[Any]:
        status, found = ray.get(self._rendezvous.exchange.remote(self.rank, value, timeout))
        if status == "timeout":
            missing = ", ".join(f"rank {r}" for r in found)
            raise CollectiveTimeoutError(
                f"a collective of the Ray group of {self.world}: {missing} never arrived within "
                f"{timeout:g} s; every actor must make the same collective calls in the same order"
            )
        result: list[Any] = found
        return result

    def _check(self, facts: Sequence[Any], errors: Sequence[str | None]) -> None:
        for r, e in enumerate(errors):
            if e is not None:
                raise CollectiveAbortedError(
                    f"rank {r} of the Ray group failed ({e}); this rank was abandoned"
                )
        calls: list[Call] = [f[0] for f in facts]
        if len(set(calls)) > 1:
            each = "; ".join(f"rank {r}: {c}" for r, c in enumerate(calls))
            raise CollectiveMismatchError(f"the ranks of the Ray group disagree ({each})")
        problem = size_problem(calls[0], [f[1] for f in facts])
        if problem is not None:
            raise CollectiveMismatchError(f"{calls[0]} in the Ray group: {problem}")

    def _communicator(self, impl: Any, timeout: float) -> Any:
        """The NCCL communicator of this process, made once: rank 0's unique id goes through Ray."""
        if self._comm is None:
            mine = impl.unique_id() if self.rank == 0 else None
            ids = self._exchange(mine, timeout)
            self._comm = impl.communicator(self.world, ids[0], self.rank)
        return self._comm


def _host_result(call: Call, parts: Sequence[bytes | None], rank: int) -> np.ndarray:
    """What rank ``rank``'s ``dst`` gets, from every rank's ``src`` bytes (rank order, numpy)."""
    dt = DTYPES[call.dtype]
    if call.kind == "broadcast":
        return np.frombuffer(parts[call.root], dt)  # type: ignore[arg-type]
    arrays = [np.frombuffer(p, dt) for p in parts]  # type: ignore[arg-type]
    if call.kind == "all_gather":
        return np.concatenate(arrays)
    acc: np.ndarray = arrays[0].copy()
    for a in arrays[1:]:
        acc = np.asarray(_REDUCE[call.op](acc, a))
    if call.kind == "reduce_scatter":
        n = acc.size // len(arrays)
        return acc[rank * n : (rank + 1) * n]
    return acc


@ray.remote
class _Worker:
    """One Ray actor holding one cubeplug client and its place in the group."""

    def __init__(self, rank: int, world: int, rendezvous: Any, selector: str) -> None:
        self.client = make_client(selector)
        self.group = RayGroup(rank, world, rendezvous)

    def run(self, fn: Callable[..., Any], *args: Any) -> Any:
        return fn(self.group.rank, self.client, self.group, *args)


class Workers:
    """``world`` Ray actors, each with the client of ``selector`` in its process (with
    ``num_gpus=1`` each actor sees one GPU, so ``"cuda"`` is that GPU). Needs ``ray.init()`` first:
    Ray, not cubeplug, starts and joins the cluster."""

    def __init__(
        self, world: int, selector: str = "cpu", *, num_gpus: float = 0, num_cpus: float = 1
    ) -> None:
        if not ray.is_initialized():
            raise CollectiveError(
                "cubeplug.ray.Workers needs a Ray cluster: call ray.init() (a local one) or "
                "ray.init(address=...) first"
            )
        if isinstance(world, bool) or not isinstance(world, int) or world < 1:
            raise ValidationError(f"world must be a positive number of actors, got {world!r}")
        self.world = world
        self.rendezvous = Rendezvous.remote(world)  # type: ignore[attr-defined]
        options = {"num_gpus": num_gpus, "num_cpus": num_cpus}
        self.actors = [
            _Worker.options(**options).remote(rank, world, self.rendezvous, selector)  # type: ignore[attr-defined]
            for rank in range(world)
        ]

    def run(self, fn: Callable[..., Any], *args: Any) -> list[Any]:
        """``fn(rank, client, group, *args)`` on every actor at once; each rank's result."""
        return list(ray.get([a.run.remote(fn, *args) for a in self.actors]))

    def shutdown(self) -> None:
        """End the actors (the cluster stays: ``ray.shutdown()`` is the caller's)."""
        for actor in (*self.actors, self.rendezvous):
            ray.kill(actor)
        self.actors = []
