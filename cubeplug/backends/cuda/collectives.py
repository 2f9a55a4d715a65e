"""Collectives of the cuda backend: NCCL through CuPy's bindings (``cupy.cuda.nccl``).

In one process (``client.all_reduce(..., devices=[...])`` from one thread per device), the first
collective of a device set makes its communicators with ``NcclCommunicator.initAll(devices)``, once,
kept in the rendezvous group (:class:`~cubeplug.core.collective.Group`); every rank then issues its
NCCL call on its own communicator, on the stream of the calling thread (after the work that stream
must wait for, as a launch: ``MultiStream.resolve``), so the collective is ordered with the client's
other work and the call returns without waiting for the device. One thread drives one device, so no
``groupStart``/``groupEnd`` is needed; :meth:`NcclCollectives.enqueue_all` wraps the calls of one
thread that drives several communicators in them.

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

    def dtypes(self, client: Any) -> frozenset[str]:
        """NCCL's types that the portable collectives take too (NCCL's i8 and u8 left out), so that
        code written for cuda runs on every backend, and so that clients sharing a device (which
        NCCL cannot group) go the portable way with the same dtypes."""
        return frozenset(NCCL_TYPES) & SHARED_TYPES & frozenset(client.capabilities.dtypes)

    # ------------------------------------------------------------------ one process
    def queue(self, group: Group, rnd: Round, member: Member) -> Callable[[], None] | None:
        """This rank's NCCL call on its communicator of the group (made by the first rank there)."""
        devices = [m.client.server.device for m in rnd.members if m is not None]
        if len(set(devices)) < len(devices):
            # NCCL runs one rank per device: clients sharing a device go the portable way.
            return portable().queue(group, rnd, member)
        comms = self._communicators(group, devices)
        self.enqueue(comms[member.rank], member.call, member.src, member.dst, member.stream, group.size)
        return None  # NCCL orders the ranks' reads and writes itself

    def _communicators(self, group: Group, devices: list[int]) -> list[Any]:
        """The group's communicators, made once per device set by the first rank that needs them."""
        with group.lock:
            comms: list[Any] | None = group.state.get("nccl")
            if comms is None:
                made = list(self._nccl.NcclCommunicator.initAll(devices))
                group.state["nccl"] = comms = made

                def destroy(comms: list[Any] = made) -> None:  # when a member of the set closes
                    for comm in comms:
                        comm.destroy()

                group.closers.append(destroy)
            return comms

    # ------------------------------------------------------------------ the NCCL calls
    def enqueue(
        self, comm: Any, call: Call, src: Handle | None, dst: Handle, stream_id: int, world: int
    ) -> None:
        """Issue ``call`` on ``comm`` on stream ``stream_id`` of this server (after the work it
        must follow), without waiting for it."""
        server = self._server
        nccl = self._nccl
        server.guard()
        bindings = tuple(h for h in (src, dst) if h is not None)
        dtype = getattr(nccl, NCCL_TYPES[call.dtype])
        itemsize = int(DTYPES[call.dtype].itemsize)
        with server.multistream.resolve(stream_id, bindings) as res:
            stream = res.stream.ptr
            recv = server.device_pointer(dst)
            send = recv if src is None else server.device_pointer(src)
            count = dst.size // itemsize
            if call.kind == "all_reduce":
                comm.allReduce(send, recv, count, dtype, getattr(nccl, NCCL_OPS[call.op]), stream)
            elif call.kind == "broadcast":
                comm.broadcast(send, recv, count, dtype, call.root, stream)
            elif call.kind == "all_gather":
                comm.allGather(send, recv, count // world, dtype, stream)
            else:
                comm.reduceScatter(send, recv, count, dtype, getattr(nccl, NCCL_OPS[call.op]), stream)

    def enqueue_all(self, calls: Sequence[tuple[Any, Call, Handle | None, Handle, int, int]]) -> None:
        """Several NCCL calls from one thread (one per communicator), inside one NCCL group."""
        self._nccl.groupStart()
        try:
            for comm, call, src, dst, stream_id, world in calls:
                self.enqueue(comm, call, src, dst, stream_id, world)
        finally:
            self._nccl.groupEnd()

    # ------------------------------------------------------------------ several processes
    def unique_id(self) -> Any:
        """A new NCCL unique id (rank 0 makes it; the others receive it through Ray)."""
        return self._nccl.get_unique_id()

    def communicator(self, world: int, unique_id: Any, rank: int) -> Any:
        """This process's communicator of a group of ``world`` processes (blocks until all joined)."""
        self._server.guard()
        return self._nccl.NcclCommunicator(world, unique_id, rank)
