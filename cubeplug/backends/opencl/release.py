"""Releasing an OpenCL server's driver objects: once, in a fixed order, never by the cyclic collector.

A server always sits in reference cycles (the client and the server point at each other, the
memory management calls back into the server), so whatever driver objects it still holds would be
released by the cyclic garbage collector, in an order that depends on the collector's lists, on
whichever thread happens to collect (NVIDIA's driver segfaulted in ``clReleaseMemObject`` there,
releasing a closed client's sub-buffers inside ``gc.collect()``). So a server keeps its driver
objects in a :class:`Natives` record with no reference back to it, and :func:`release` drops them
once, in a fixed order, when the server is closed or, failing that, from the server's finalizer.
Servers still open at interpreter exit are closed then (:data:`open_servers`).
"""

from __future__ import annotations

import atexit
import contextlib
import threading
import weakref
from typing import Any

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.backends.opencl.staging import StagingPool
from cubeplug.backends.opencl.storage import OpenCLStorage
from cubeplug.backends.opencl.stream import EventWaiter
from cubeplug.plugin import MultiStream

#: Servers still open: closed at interpreter exit, so that no helper thread is inside a PyOpenCL call
#: (a C++ frame) when Python finalises, which aborts the process ("terminate called...").
open_servers: weakref.WeakSet[Any] = weakref.WeakSet()

#: How long closing waits for a helper thread (it only waits for work already queued).
JOIN_TIMEOUT = 60.0


class Natives:
    """Everything a server holds of the driver, with no reference back to the server."""

    __slots__ = (
        "compiled", "ctx", "multistream", "plans", "replays", "scratch", "staging", "storage", "waiter",
    )

    def __init__(
        self,
        ctx: DeviceContext,
        storage: OpenCLStorage,
        multistream: MultiStream[Any, Any],
        waiter: EventWaiter,
        staging: StagingPool,
        compiled: list[dict[Any, Any]],
    ) -> None:
        self.ctx = ctx
        self.storage = storage
        self.multistream = multistream
        self.waiter = waiter
        self.staging = staging
        self.compiled = compiled
        #: The server's launch plans, checked and unchecked (they hold compiled kernels too).
        self.plans: list[dict[Any, Any]] = []
        self.scratch: Any = None
        #: The graphs' native replays still open (held weakly: a graph closes its own).
        self.replays: weakref.WeakSet[Any] = weakref.WeakSet()


def forget_bindings(tables: list[dict[Any, Any]]) -> None:
    """Kernels forget the buffers they bound last (they bind them again at their next launch)."""
    for table in tables:
        for compiled in list(table.values()):
            compiled.program.forget_bindings()


def release(natives: Natives) -> None:
    """Release a server's driver objects in a safe order: first stop the helper threads (after the
    work already queued), so that no thread waits on an event while its queue goes away; then let
    every queue finish; then close the graphs' replays and drop the kernels (they hold their last
    buffer arguments, the replays their command buffers, kernels and buffers), the staging
    chunks (their unmaps run on the allocation queue, which is finished next), the pages and
    sub-buffers, and last the queues themselves."""
    import pyopencl as cl

    ms = natives.multistream
    if threading.current_thread() in (ms.gc.thread, natives.waiter.thread):
        # The collector ran on a helper thread of this very server, which cannot wait for itself.
        threading.Thread(target=release, args=(natives,), name="cubeplug-opencl-release").start()
        return
    natives.waiter.close(JOIN_TIMEOUT)
    ms.close()
    ms.gc.join(JOIN_TIMEOUT)
    states = [state for _, state in ms.streams.created()]
    states.extend(ms.streams.created_specials())
    for state in states:
        with contextlib.suppress(cl.Error):
            state.stream.finish()
    for replay in list(natives.replays):
        replay.close()
    forget_bindings(natives.compiled)
    for table in natives.compiled:
        table.clear()
    for plans in natives.plans:
        plans.clear()
    natives.scratch = None
    natives.staging.keep = 0  # chunks still on their way back are released, not kept
    natives.staging.clear()
    with contextlib.suppress(cl.Error):
        natives.ctx.alloc_queue.finish()
    natives.storage.close()
    ms.streams.clear()
    del states


@atexit.register
def close_open_servers() -> None:
    """Close the servers still open (at interpreter exit)."""
    for server in list(open_servers):
        if server.forked:  # a forked child's copy of the parent's server: its driver is the parent's
            continue
        with contextlib.suppress(Exception):
            server.close()

