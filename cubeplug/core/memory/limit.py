"""The memory limit: a byte budget for device pages, shared by the memory managements of a device."""

from __future__ import annotations

import re
import threading

from cubeplug.core.errors import ValidationError

_SIZE = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*([a-z]*)\s*$", re.IGNORECASE)
_PERCENT = re.compile(r"^\s*(\d+(?:\.\d*)?|\.\d+)\s*%\s*$")
#: Unit suffixes: ``K``/``KiB`` are binary (1024), ``KB`` is decimal (1000); the same for M, G, T.
_UNITS = {"": 1, "b": 1}
for _i, _p in enumerate("kmgt", start=1):
    _UNITS[_p] = _UNITS[_p + "ib"] = 1024**_i
    _UNITS[_p + "b"] = 1000**_i


class MemoryLimit:
    """A thread-safe budget of bytes: pages count against it while allocated."""

    __slots__ = ("_lock", "_used", "bytes")

    def __init__(self, bytes: int) -> None:
        if isinstance(bytes, bool) or not isinstance(bytes, int) or bytes <= 0:
            raise ValidationError(f"a memory limit is a positive number of bytes, got {bytes!r}")
        #: The budget in bytes.
        self.bytes = bytes
        self._used = 0
        self._lock = threading.Lock()

    @classmethod
    def parse(cls, value: int | str | MemoryLimit, total: int | None = None) -> MemoryLimit:
        """A limit from bytes (``1 << 30``), a size (``"2GiB"``) or a share of ``total`` (``"80%"``)."""
        if isinstance(value, MemoryLimit):
            return value
        if isinstance(value, int) and not isinstance(value, bool):
            return cls(value)
        if not isinstance(value, str):
            raise ValidationError(
                f"a memory limit is a byte count, a size such as '2GiB' or a share such as '80%', "
                f"got {type(value).__name__} {value!r}"
            )
        percent = _PERCENT.match(value)
        if percent:
            share = float(percent.group(1))
            if total is None:
                raise ValidationError(
                    f"memory limit {value!r} is a share of the device's memory, which this device does "
                    f"not report; give the limit in bytes (e.g. '2GiB')"
                )
            if not 0 < share <= 100:
                raise ValidationError(f"memory limit {value!r}: a share is above 0 % and at most 100 %")
            return cls(max(1, int(total * share / 100)))
        size = _SIZE.match(value)
        unit = _UNITS.get(size.group(2).lower()) if size else None
        if size is None or unit is None:
            raise ValidationError(
                f"memory limit {value!r} is not a size: use bytes (1073741824), a size with a unit "
                f"(B, KiB, MiB, GiB, TiB; KB, MB, GB, TB are powers of 1000) or a share ('80%')"
            )
        return cls(int(float(size.group(1)) * unit))

    @property
    def used(self) -> int:
        """Bytes of pages allocated against this limit now."""
        return self._used

    @property
    def available(self) -> int:
        """Bytes still allowed."""
        return self.bytes - self._used

    def try_acquire(self, n: int) -> bool:
        """Count ``n`` more bytes against the limit, or return False (counting nothing) if they exceed it."""
        with self._lock:
            if self._used + n > self.bytes:
                return False
            self._used += n
            return True

    def release(self, n: int) -> None:
        """Give ``n`` bytes back to the budget."""
        with self._lock:
            self._used -= n

    def __repr__(self) -> str:
        return f"MemoryLimit({self.bytes}, used={self._used})"
