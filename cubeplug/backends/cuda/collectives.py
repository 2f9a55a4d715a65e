"""Collectives of the cuda backend: NCCL through CuPy's bindings (``cupy.cuda.nccl``).

In one process (``client.all_reduce(..., devices=[...])`` from one thread per device), the first
collective of a device set makes its communicators with ``NcclCommunicator.initAll(devices)``, once,
kept in the rendezvous group (:class:`~cubeplug.core.collective.Group`). The last rank to arrive
then issues every rank's NCCL call, each on its communicator and on the stream of that rank's
calling thread (after the work that stream must wait for, as a launch: ``MultiStream.enter``), in
one ``groupStart``/``groupEnd`` (:meth:`NcclCollectives.queue_all`), while the other ranks wait for
it: one thread hand-off per call, the way NCCL wants one thread driving several devices. The
collective is ordered with each client's other work and returns without waiting for the device.

Across processes (the Ray path, :mod:`cubeplug.ray`), :meth:`NcclCollectives.unique_id` makes the id
rank 0 shares through Ray and :meth:`NcclCollectives.communicator` joins it
(``NcclCommunicator(world, id, rank)``); :meth:`NcclCollectives.enqueue` is the same call.

NCCL missing (CuPy built without it, or ``libnccl`` absent) is a
:class:`~cubeplug.plugin.CollectiveUnavailableError` naming the remedy; ``[backends.cuda]
collectives = "portable"`` runs the portable collectives instead.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cubeplug.backends.cuda.device import current_device_kept
from cubeplug.plugin import (
    DTYPES,
    Call,
    Collectives,
    CollectiveUnavailableError,
    Group,
    Handle,
    Member,
    Round,
    portable,
)

#: cubeplug dtypes and the names of CuPy's NCCL data type constants.
NCCL_TYPES = {
    "i8": "NCCL_INT8", "u8": "NCCL_UINT8", "i32": "NCCL_INT32", "u32": "NCCL_UINT32", "i64": "NCCL_INT64",
    "u64": "NCCL_UINT64", "f16": "NCCL_FLOAT16", "f32": "NCCL_FLOAT32", "f64": "NCCL_FLOAT64",
}  # fmt: skip
#: The dtypes every backend's collectives take (the portable ones' kernel types).
SHARED_TYPES = frozenset({"f16", "f32", "f64", "i32", "u32", "i64", "u64"})
NCCL_OPS = {"sum": "NCCL_SUM", "prod": "NCCL_PROD", "min": "NCCL_MIN", "max": "NCCL_MAX"}
INSTALL_HINT = (
    "install NCCL for CuPy (pip install nvidia-nccl-cu12, or cupy's conda package), or set "
    "[backends.cuda] collectives = \"portable\" to use cubeplug's portable collectives"
)


def load_nccl() -> Any:
    """``cupy.cuda.nccl``, or CollectiveUnavailableError saying how to get it."""
    try:
        from cupy.cuda import nccl
    except Exception as exc:  # ImportError, or a missing libnccl reported by the import
        raise CollectiveUnavailableError(
            f"NCCL is not available to CuPy here ({exc}); {INSTALL_HINT}"
        ) from exc
    if nccl is None or not getattr(nccl, "available", True):
        raise CollectiveUnavailableError(f"CuPy was built without NCCL; {INSTALL_HINT}")
    return nccl


class NcclCollectives(Collectives):
    """NCCL collectives of one cuda server (``CudaServer.new_collectives``)."""

    name = "nccl"

    def __init__(self, server: Any, nccl: Any) -> None:
        self._server = server
        self._nccl = nccl
        self._plans: dict[Call, tuple[str, Any, Any, int]] = {}

    def dtypes(self, client: Any) -> frozenset[str]:
        """NCCL's types that the portable collectives take too (NCCL's i8 and u8 left out), so that
        code written for cuda runs on every backend, and so that clients sharing a device (which
        NCCL cannot group) go the portable way with the same dtypes."""
        return frozenset(NCCL_TYPES) & SHARED_TYPES & frozenset(client.capabilities.dtypes)

    # ------------------------------------------------------------------ one process
    def queue_all(self, group: Group, rnd: Round) -> bool:
        """Every rank's NCCL call in one NCCL group, from the last rank's thread; False (each rank
        goes the portable way) when clients share a device, which NCCL cannot group."""
        comms = self._communicators(group, rnd)
        if comms is None:
            return False
        members: list[Member] = rnd.members  # type: ignore[assignment]  # the round is complete
        # Each call makes its server's device current; the calling thread gets its own back after.
        world = group.size
        calls = [(m.client.server, comms[m.rank], m.call, m.src, m.dst, m.stream, world) for m in members]
        with current_device_kept():
            self.enqueue_all(calls)
        return True

    def queue(self, group: Group, rnd: Round, member: Member) -> Callable[[], None] | None:
        """Clients sharing a device (``queue_all`` said False): the portable collectives."""
        return portable().queue(group, rnd, member)

    def _communicators(self, group: Group, rnd: Round) -> list[Any] | None:
        """The group's communicators, made once per device set (None: clients share a device).
        A group's members keep their devices (it is keyed by their servers or device indices)."""
        # Only the last rank calls this, with every member's client lock held; group.lock guards
        # the state against the group's close.
        devices = [m.client.server.device for m in rnd.members]  # type: ignore[union-attr]  # complete
        with group.lock:
            if "nccl" in group.state:
                comms: list[Any] | None = group.state["nccl"]
                return comms
            if len(set(devices)) < len(devices):
                group.state["nccl"] = None
                return None
            made = list(self._nccl.NcclCommunicator.initAll(devices))

            def destroy(comms: list[Any] = made) -> None:  # when a member of the set closes
                for comm in comms:
                    comm.destroy()

            group.closers.append(destroy)
            group.state["nccl"] = made
            return made

    # ------------------------------------------------------------------ the NCCL calls
    def _plan(self, call: Call) -> tuple[str, Any, Any, int]:
        """(method, NCCL type, NCCL op or root, item size) of ``call``, made once per call."""
        plan = self._plans.get(call)
        if plan is None:
            nccl = self._nccl
            method = {"all_reduce": "allReduce", "broadcast": "broadcast", "all_gather": "allGather",
                      "reduce_scatter": "reduceScatter"}[call.kind]  # fmt: skip
            extra = call.root if call.kind == "broadcast" else getattr(nccl, NCCL_OPS.get(call.op, ""), None)
            plan = self._plans[call] = (
                method, getattr(nccl, NCCL_TYPES[call.dtype]), extra, int(DTYPES[call.dtype].itemsize)
            )
        return plan

    def enqueue(
        self, comm: Any, call: Call, src: Handle | None, dst: Handle, stream_id: int, world: int
    ) -> None:
        """Issue ``call`` on ``comm`` on stream ``stream_id`` of this server (after the work it
        must follow), without waiting for it."""
        self.enqueue_all([(self._server, comm, call, src, dst, stream_id, world)])

    def enqueue_all(self, calls: Sequence[tuple[Any, Any, Call, Handle | None, Handle, int, int]]) -> None:
        """NCCL calls ``(server, comm, call, src, dst, stream id, world)`` from one thread, inside
        one NCCL group (NCCL launches the kernels at ``groupEnd``, so the memory a stream borrows
        from another is pinned after it, ordered after the kernels)."""
        nccl = self._nccl
        pins = []
        # Every rank's checks, ordering and pointers first: a failure while the group is open would
        # still launch the ranks issued before it at groupEnd, and their kernels would wait forever
        # for the missing peer (those clients' streams hung).
        issued = []
        try:
            for server, comm, call, src, dst, stream_id, world in calls:
                method, dtype, extra, itemsize = self._plan(call)
                server.guard()
                ms = server.multistream
                state, analysis = ms.enter(stream_id, (src, dst) if src is not None else (dst,))
                if analysis is not None and analysis.pinned:
                    pins.append((ms, analysis, state.stream))
                recv = server.device_pointer(dst)
                send = recv if src is None else server.device_pointer(src)
                count = dst.size // itemsize
                issued.append((comm, method, dtype, extra, send, recv, count, state.stream.ptr, world))
            nccl.groupStart()
            try:
                for comm, method, dtype, extra, send, recv, count, stream, world in issued:
                    if method == "allReduce":
                        comm.allReduce(send, recv, count, dtype, extra, stream)
                    elif method == "broadcast":
                        comm.broadcast(send, recv, count, dtype, extra, stream)
                    elif method == "allGather":
                        comm.allGather(send, recv, count // world, dtype, stream)
                    else:
                        comm.reduceScatter(send, recv, count, dtype, extra, stream)
            finally:
                nccl.groupEnd()
        finally:
            for ms, analysis, stream in pins:
                ms.pin(analysis, stream)

    # ------------------------------------------------------------------ several processes
    def unique_id(self) -> Any:
        """A new NCCL unique id (rank 0 makes it; the others receive it through Ray)."""
        return self._nccl.get_unique_id()

    def communicator(self, world: int, unique_id: Any, rank: int) -> Any:
        """This process's communicator of a group of ``world`` processes (blocks until all joined)."""
        self._server.guard()
        return self._nccl.NcclCommunicator(world, unique_id, rank)
