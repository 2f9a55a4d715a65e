"""Events the runtime core reports (a kernel compiled, an allocation failed) to whoever observes them.

The core knows nothing of plugins: the registry (:mod:`cubeplug.registry.plugins`) installs itself as
the observer and forwards each event to the plugins' observer hooks (``cubeplug_kernel_compiled``,
``cubeplug_out_of_memory`` in :mod:`cubeplug.hookspecs`). With no observer, or one that wants no such
event, reporting costs one check; an observer's failure never reaches the code that reported.
"""

from __future__ import annotations

from typing import Any, Protocol

KERNEL_COMPILED = "cubeplug_kernel_compiled"
OUT_OF_MEMORY = "cubeplug_out_of_memory"


class Observer(Protocol):
    """What receives the core's events."""

    def observes(self, event: str) -> bool:
        """True when some listener wants ``event`` (checked before the event's arguments are built)."""

    def notify(self, event: str, **kwargs: Any) -> None:
        """Deliver ``event``; must not raise (failures are the observer's to log)."""


_observer: Observer | None = None


def set_observer(observer: Observer | None) -> None:
    """Install the process's observer (None: events go nowhere)."""
    global _observer
    _observer = observer


def kernel_compiled(backend: str, kernel: str, dialect: str, seconds: float) -> None:
    """A kernel was compiled for ``backend`` in ``seconds``."""
    observer = _observer
    if observer is not None and observer.observes(KERNEL_COMPILED):
        observer.notify(KERNEL_COMPILED, backend=backend, kernel=kernel, dialect=dialect, seconds=seconds)


def out_of_memory(backend: str, requested: int, in_use: int, reserved: int) -> None:
    """An allocation of ``requested`` bytes failed on ``backend`` even after the pools gave back memory."""
    observer = _observer
    if observer is not None and observer.observes(OUT_OF_MEMORY):
        observer.notify(OUT_OF_MEMORY, backend=backend, requested=requested, in_use=in_use, reserved=reserved)
