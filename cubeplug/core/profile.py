"""Profiling: tokens that nest and overlap, and the durations they measure."""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from typing import Any, Literal

log = logging.getLogger("cubeplug.profile")

TimingMethod = Literal["device", "system"]


@dataclass(frozen=True, slots=True)
class ProfileToken:
    """An open profiling window: its stream, host start time and device marker (if any)."""

    stream_id: int
    start: float
    marker: Any = None


@dataclass(frozen=True, slots=True)
class ProfileDuration:
    """A measured duration and how it was measured ("device" events or "system" clock after a sync)."""

    duration: float
    method: TimingMethod

    def seconds(self) -> float:
        """The duration in seconds."""
        return self.duration

    def __str__(self) -> str:
        return f"{self.duration * 1e3:.3f} ms ({self.method})"


@dataclass
class KernelStats:
    """Launch count and total time of one kernel, for the profiling summary."""

    launches: int = 0
    seconds: float = 0.0
    method: str = "system"


@dataclass
class ProfileLog:
    """Per-kernel timings collected when ``[profiling] level`` is not disabled."""

    level: str = "disabled"
    stats: dict[str, KernelStats] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    @property
    def enabled(self) -> bool:
        """True when launches are timed."""
        return self.level != "disabled"

    def record(self, kernel: str, duration: ProfileDuration) -> None:
        """Add one timed launch; at level "full" it is logged too."""
        with self._lock:
            st = self.stats.setdefault(kernel, KernelStats())
            st.launches += 1
            st.seconds += duration.duration
            st.method = duration.method
        if self.level == "full":
            log.info("launch %s: %s", kernel, duration)

    def summary(self) -> str:
        """A table of every kernel timed so far, slowest first."""
        rows = sorted(self.stats.items(), key=lambda kv: -kv[1].seconds)
        lines = [f"{'kernel':<32} {'launches':>9} {'total ms':>10} {'mean us':>10} method"]
        for name, st in rows:
            mean = st.seconds / st.launches * 1e6 if st.launches else 0.0
            lines.append(f"{name:<32} {st.launches:>9} {st.seconds * 1e3:>10.3f} {mean:>10.1f} {st.method}")
        return "\n".join(lines)
