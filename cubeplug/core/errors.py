"""The exception hierarchy of cubeplug.

Every error cubeplug raises on purpose derives from :class:`CubeplugError`. Native errors of the
GPU libraries are mapped at the backend boundary and chained with ``raise ... from``.
"""

from __future__ import annotations

from typing import Any


class CubeplugError(Exception):
    """Base class of every error cubeplug raises on purpose."""


class ConfigError(CubeplugError, ValueError):
    """A configuration file, variable or argument holds a value cubeplug cannot use."""

    def __init__(
        self,
        message: str,
        *,
        source: str | None = None,
        key: str | None = None,
        allowed: str | None = None,
    ) -> None:
        self.source = source
        self.key = key
        self.allowed = allowed
        parts = [message]
        if source:
            parts.append(f"(in {source})")
        if allowed:
            parts.append(f"allowed: {allowed}")
        super().__init__(" ".join(parts))


class PluginError(CubeplugError):
    """A backend plugin failed to load, register or answer a hook."""

    def __init__(
        self,
        message: str,
        *,
        dist: str | None = None,
        version: str | None = None,
        entry_point: str | None = None,
        cause: BaseException | None = None,
        remedy: str | None = None,
    ) -> None:
        self.dist = dist
        self.version = version
        self.entry_point = entry_point
        self.cause = cause
        self.remedy = remedy
        parts = [message]
        if dist:
            parts.append(f"[{dist}=={version or '?'}]")
        if entry_point:
            parts.append(f"entry point {entry_point!r}")
        if cause is not None:
            parts.append(f"cause: {type(cause).__name__}: {cause}")
        if remedy:
            parts.append(f"remedy: {remedy}")
        super().__init__("; ".join(parts))


class BackendUnavailableError(CubeplugError):
    """The requested backend or device cannot be used on this machine."""


class ValidationError(CubeplugError, ValueError):
    """An argument is invalid: a size, an offset, a handle, a launch argument or an alignment."""


class CompileError(CubeplugError):
    """A kernel failed to compile; carries the backend's log and the numbered source."""

    def __init__(
        self,
        message: str,
        *,
        backend: str,
        kernel: str,
        source: str = "",
        log: str = "",
        options: tuple[str, ...] | list[str] = (),
        line: int | None = None,
        col: int | None = None,
    ) -> None:
        self.backend = backend
        self.kernel = kernel
        self.source = source
        self.log = log
        self.options = tuple(options)
        self.line = line
        self.col = col
        where = f" at line {line}:{col}" if line is not None else ""
        super().__init__(f"kernel {kernel!r} failed to compile on {backend}{where}: {message}")

    def numbered_source(self) -> str:
        """The source with line numbers, as the compiler saw it."""
        return "\n".join(f"{i:4d} | {text}" for i, text in enumerate(self.source.splitlines(), 1))

    def dump(self) -> str:
        """A full report: message, options, log and numbered source."""
        return (
            f"{self}\noptions: {' '.join(self.options) or '(none)'}\n--- log ---\n{self.log.rstrip()}\n"
            f"--- source ---\n{self.numbered_source()}\n"
        )


class OutOfMemoryError(CubeplugError, MemoryError):
    """The device has no room for an allocation, even after cleanup and a retry."""

    def __init__(
        self,
        requested: int,
        *,
        in_use: int,
        reserved: int,
        limit: int | None,
        device_free: int | None = None,
        device_total: int | None = None,
        detail: str = "",
    ) -> None:
        self.requested = requested
        self.in_use = in_use
        self.reserved = reserved
        self.limit = limit
        self.device_free = device_free
        self.device_total = device_total
        self.detail = detail
        lim = "none" if limit is None else f"{limit} B"
        dev = ""
        if device_total is not None:
            dev = f", device free/total {device_free}/{device_total} B"
        msg = (
            f"out of device memory: requested {requested} B, in use {in_use} B, reserved {reserved} B, "
            f"limit {lim}{dev}. Free handles you no longer need, call client.memory_cleanup(), or raise "
            f"[memory] limit"
        )
        if detail:
            msg += f" ({detail})"
        super().__init__(msg)


class BufferTooBig(ValidationError):
    """No memory pool accepts an allocation of this size: it exceeds the device's largest buffer."""

    def __init__(self, requested: int, max_size: int) -> None:
        self.requested = requested
        self.max_size = max_size
        super().__init__(
            f"a buffer of {requested} B is larger than the largest this device allocates ({max_size} B); "
            f"split the data into several buffers"
        )


class LaunchError(CubeplugError):
    """A kernel launch or a queued operation failed on the device."""


class WorkDroppedError(LaunchError):
    """Work the client accepted was dropped before it reached the device (an exception such as
    KeyboardInterrupt interrupted its submission); the message says which work. Raised at the next
    flush, sync or read, so the loss is never silent."""


class MemoryCorruptionError(LaunchError):
    """A kernel wrote outside its buffer: a red zone of the checked-memory mode (``[memory] guard``)
    was overwritten. The message names the allocation and the kernels launched since the last check."""

    def __init__(self, message: str, *, nbytes: int = 0, kernels: tuple[str, ...] = ()) -> None:
        #: The size of the (first) allocation whose zone was overwritten.
        self.nbytes = nbytes
        #: The kernels launched since the last check, the latest last.
        self.kernels = kernels
        super().__init__(message)


class CaptureError(CubeplugError):
    """Graph capture misused: a capture inside a capture on one thread, a read or sync inside a
    capture block, a replay of a closed graph. The message says what to do instead."""


class ForkedClientError(CubeplugError):
    """A client was used in a child process after ``fork``: its device, threads and locks belong to
    the parent. Create a new client in the child, or start children with the "spawn" method."""


class DeviceLostError(CubeplugError):
    """The device was lost or reset; every handle of its client is invalid."""


def describe(value: Any) -> str:
    """A short description of a value for error messages."""
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


class CollectiveError(CubeplugError):
    """A collective (``all_reduce``, ``broadcast``, ...) could not run; every participant is told."""


class CollectiveMismatchError(CollectiveError, ValidationError):
    """The participants of one collective disagree (operation, dtype, size, root), or one argument
    is bad (a device listed twice, a caller not in the list, an unknown op or dtype)."""


class CollectiveTimeoutError(CollectiveError):
    """A participant never arrived within the timeout; the message names the missing ranks."""


class CollectiveAbortedError(CollectiveError):
    """Another participant of the same collective failed (a closed client, a bad handle): this one
    was abandoned; the message names the rank and its error."""


class CollectiveUnavailableError(CollectiveError, BackendUnavailableError):
    """The collective library a backend needs is missing here (e.g. NCCL for the cuda backend)."""
