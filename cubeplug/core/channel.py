"""The channel between a client and its server (after cubecl-runtime's channel).

A :class:`DeviceHandle` serialises every call to one server with a re-entrant lock, so a client may
be used from many threads at once while the server sees one call at a time. Blocking waits (reads,
syncs) happen outside the lock, so one thread waiting never stalls the others' launches. One path
runs without the lock: ``client.empty`` lending a freed slice of the exact size again, which takes
it off the pool's queue in a single atomic step (``ComputeServer.empty_path``).
"""

from __future__ import annotations

import threading

from cubeplug.core.server import ComputeServer


class DeviceHandle:
    """One server and the lock that serialises access to it."""

    __slots__ = ("lock", "server")

    def __init__(self, server: ComputeServer) -> None:
        self.server = server
        self.lock = threading.RLock()
