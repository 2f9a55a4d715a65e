"""The configuration as the runtime sees it: typed sections, their defaults, and where each value came from.

The runtime (servers, memory, streams, tune) reads only these dataclasses. Reading them from files and
the environment, validating and caching them is the registry's work (:mod:`cubeplug.registry.settings`);
users' guide: docs/config.md.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class MemoryConfig:
    """``[memory]``: persistent_memory (enabled / disabled / enforced), limit (bytes, "80%" or None)
    and guard (red zones around every allocation, checked at each sync: core/memory/guard.py)."""

    persistent_memory: str = "enabled"
    limit: int | str | None = None
    guard: bool = False


@dataclass
class StreamingConfig:
    """``[streaming]``: max_streams and policy (per-thread / single)."""

    max_streams: int = 8
    policy: str = "per-thread"


@dataclass
class AutotuneConfig:
    """``[autotune]``: level (minimal / balanced / extensive / full), cache (true / false), bench.*."""

    level: str = "balanced"
    cache: bool = True
    bench: dict[str, Any] = field(default_factory=dict)


@dataclass
class CompilationConfig:
    """``[compilation]``: cache (true / false) and check_mode (checked / unchecked)."""

    cache: bool = True
    check_mode: str = "checked"


@dataclass
class ProfilingConfig:
    """``[profiling]``: level (disabled / basic / full)."""

    level: str = "disabled"


@dataclass
class LoggingConfig:
    """``[logging]``: level (warning / info / debug)."""

    level: str = "warning"


@dataclass
class BackendConfig:
    """``[backend]``: default selector and auto-selection order."""

    default: str = "auto"
    order: list[str] = field(default_factory=list)


@dataclass
class Config:
    """Every section of the effective configuration."""

    backend: BackendConfig = field(default_factory=BackendConfig)
    backends: dict[str, dict[str, Any]] = field(default_factory=dict)
    memory: MemoryConfig = field(default_factory=MemoryConfig)
    streaming: StreamingConfig = field(default_factory=StreamingConfig)
    autotune: AutotuneConfig = field(default_factory=AutotuneConfig)
    compilation: CompilationConfig = field(default_factory=CompilationConfig)
    profiling: ProfilingConfig = field(default_factory=ProfilingConfig)
    logging: LoggingConfig = field(default_factory=LoggingConfig)

    def backend_options(self, name: str) -> dict[str, Any]:
        """The ``[backends.<name>]`` options (empty when none are set)."""
        return dict(self.backends.get(name, {}))


# ---------------------------------------------------------------------------------------- origins
@dataclass(frozen=True)
class Origin:
    """Where a value came from: its layer (default, user, project, env, argument) and the file or variable."""

    kind: str
    source: str = ""

    def __str__(self) -> str:
        if self.kind == "default":
            return "default"
        if self.kind == "env":
            return f"env {self.source}"
        if self.kind == "user":
            return f"user config {self.source}"
        if self.kind == "project":
            return f"project config {self.source}"
        return self.kind if not self.source else f"{self.kind} {self.source}"


DEFAULT = Origin("default")


@dataclass(frozen=True)
class EffectiveConfig:
    """The typed config plus, for every dotted key, the origin of its value, and the files read."""

    config: Config
    origins: dict[str, Origin]
    values: dict[str, Any]
    files: tuple[str, ...] = ()
    notes: tuple[str, ...] = ()

    def origin(self, key: str) -> Origin:
        """The origin of a dotted key such as ``"memory.limit"`` (default when never set)."""
        return self.origins.get(key, DEFAULT)

    def items(self) -> list[tuple[str, Any, Origin]]:
        """Every effective value as ``(dotted key, value, origin)``, sorted by key."""
        return [(k, self.values[k], self.origins[k]) for k in sorted(self.values)]
