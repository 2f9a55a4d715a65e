"""Red zones: the checked-memory mode that finds kernels writing past their buffers.

A kernel in hand-written C can write past the end of its buffer into whatever the pool lent next to
it, and nothing notices: the neighbour is silently corrupted. With ``[memory] guard = true`` every
allocation gets a red zone before and after it, filled with a known pattern, and every
``client.sync()`` reads the zones of the live allocations back: a zone that changed raises
:class:`~cubeplug.core.errors.MemoryCorruptionError` naming the allocation and the kernels launched
since the last check, and the zones are armed again. The mode costs two writes per allocation, a read
per live allocation per sync, and the launch plans (launches are recorded one by one): a debugging
mode, off by default.
"""

from __future__ import annotations

import collections
import weakref
from typing import Any

from cubeplug.core.errors import MemoryCorruptionError
from cubeplug.core.handle import Handle

#: Bytes of each red zone, at least: a multiple of the device's offset alignment above this.
ZONE_MIN = 256
#: The zones' pattern (a byte a kernel rarely writes by chance: 0xCB, as in debug allocators).
PATTERN = 0xCB
#: How many launches the error names at most (the most recent ones).
RECENT = 32


class RedZones:
    """The red zones of one server's allocations, and the launches since they were last checked."""

    def __init__(self, alignment: int) -> None:
        align = max(1, alignment)
        #: Bytes of each zone: ``ZONE_MIN`` rounded up to the alignment (the user's view stays aligned).
        self.zone = -(-ZONE_MIN // align) * align
        self._canary = bytes([PATTERN]) * self.zone
        #: The armed allocations: their slice token (weakly: a freed slice is no longer watched), the
        #: user's size and the stream that allocated them.
        self._armed: list[tuple[weakref.ref[Any], int, int]] = []
        self._launched: collections.deque[str] = collections.deque(maxlen=RECENT)
        self._launches = 0

    def extra(self) -> int:
        """Bytes an allocation of the mode takes beyond what the user asked for."""
        return 2 * self.zone

    def arm(self, server: Any, raw: Handle, nbytes: int, stream_id: int) -> Handle:
        """Fill the zones around ``nbytes`` in ``raw`` (``nbytes + extra()`` bytes) and return the
        user's view between them."""
        for zone in self._zones(raw, nbytes):
            server.write(stream_id, zone, memoryview(self._canary))
        self._armed.append((weakref.ref(raw.memory()), nbytes, stream_id))
        return raw.offset_start(self.zone).offset_end(self.zone)

    def launched(self, kernel: str) -> None:
        """Note a launch (named in the error when a zone is found overwritten)."""
        self._launches += 1
        self._launched.append(kernel)

    def check(self, server: Any, stream_id: int) -> None:
        """Read every live allocation's zones back; MemoryCorruptionError for any that changed."""
        live, zones = [], []
        for ref, nbytes, sid in self._armed:
            token = ref()
            if token is not None:
                raw = Handle(token, server, nbytes + self.extra(), sid)
                live.append((ref, nbytes, sid, raw))
                zones += self._zones(raw, nbytes)
        self._armed = [entry[:3] for entry in live]
        if not zones:
            return
        data = server.read_async(zones, stream_id).result()
        broken = []
        for i, zone in enumerate(zones):
            if bytes(data[i]) != self._canary:
                _, nbytes, sid, _ = live[i // 2]
                broken.append((nbytes, sid, "before" if i % 2 == 0 else "after", zone))
        launches, names = self._launches, list(self._launched)
        self._launches = 0
        self._launched.clear()
        if not broken:
            return
        for _, sid, _, zone in broken:  # armed again: the next check sees only new damage
            server.write(sid, zone, memoryview(self._canary))
        first = broken[0]
        where = "; ".join(f"the zone {side} an allocation of {n} B (stream {s})" for n, s, side, _ in broken)
        kernels = ", ".join(dict.fromkeys(names)) or "none recorded"
        raise MemoryCorruptionError(
            f"{len(broken)} red zone(s) overwritten: {where}. A kernel wrote outside its buffer; "
            f"{launches} launch(es) since the last check, the latest of: {kernels}. Check the index "
            f"bounds of those kernels (the zones were armed again)",
            nbytes=first[0],
            kernels=tuple(dict.fromkeys(names)),
        )

    def _zones(self, raw: Handle, nbytes: int) -> list[Handle]:
        """The two zones of an allocation, as views of its raw handle."""
        z = self.zone
        return [raw.offset_end(nbytes + z), raw.offset_start(z + nbytes)]
