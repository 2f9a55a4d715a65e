"""Backend selectors: ``"name"``, ``"name:device"``, ``"name:filter"``, ``"name:filter:device"``, ``"auto"``.

Parsed wherever a selector is accepted (``cubeplug.client()``, ``cubeplug.use()``, ``CUBEPLUG_BACKEND``,
``[backend] default``), so every place refuses a bad one with the same message and examples.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from cubeplug.core.errors import ConfigError

EXAMPLES = '"auto", "cpu", "cuda", "cuda:1", "opencl:0", "opencl:pocl:0", "webgpu"'
_NAME = re.compile(r"^[a-z][a-z0-9_-]*$")
_FILTER = re.compile(r"^[^:\s](?:[^:]*[^:\s])?$")


@dataclass(frozen=True)
class Selector:
    """A parsed selector: backend name (or ``"auto"``), device index and an optional platform filter."""

    backend: str
    device: int | None = None
    filter: str | None = None

    @property
    def is_auto(self) -> bool:
        """True when the backend is chosen by auto-selection."""
        return self.backend == "auto"

    def __str__(self) -> str:
        parts = [self.backend]
        if self.filter is not None:
            parts.append(self.filter)
        if self.device is not None:
            parts.append(str(self.device))
        return ":".join(parts)


def parse_selector(text: str | Selector, source: str | None = None) -> Selector:
    """Parse ``"name"``, ``"name:device"``, ``"name:filter"`` or ``"name:filter:device"`` (or ``"auto"``)."""
    if isinstance(text, Selector):
        return text
    if not isinstance(text, str):
        raise ConfigError(f"a backend selector must be a string, not {type(text).__name__}", source=source)
    parts = [p.strip() for p in text.strip().lower().split(":")]
    name, rest = parts[0], parts[1:]
    device: int | None = None
    filt: str | None = None
    ok = bool(_NAME.match(name)) and len(rest) <= 2
    if ok and rest and rest[-1].isdigit():
        device = int(rest.pop())
    if ok and len(rest) == 1 and _FILTER.match(rest[0]) and not rest[0].lstrip("-").isdigit():
        filt = rest.pop()
    if not ok or rest or (name == "auto" and (device is not None or filt is not None)):
        raise ConfigError(
            f"bad backend selector {text!r}: expected name[:filter][:device]",
            source=source,
            key="backend",
            allowed=EXAMPLES,
        )
    return Selector(name, device, filt)
