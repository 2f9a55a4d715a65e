"""Device loss: a lost GPUDevice becomes :class:`~cubeplug.core.errors.DeviceLostError`.

wgpu-py 0.31 and 0.32 have no ``device.lost`` promise (its device-lost callback only logs), so loss
is noticed where it shows: a wgpu call that fails with "Parent device is lost", a read-back whose
mapping fails, or a probe while a wait takes long. Whoever notices marks the shared
:class:`DeviceHealth`; from then on every call that would touch the device raises DeviceLostError
before calling wgpu. That matters beyond the message: wgpu-native aborts the whole process when
``queue.submit`` runs on a lost device, so nothing is submitted once the device is known lost.
"""

from __future__ import annotations

from typing import Any

from cubeplug.plugin import DeviceLostError

#: Lower-case fragments of wgpu's messages that mean the device is gone.
_LOST_MARKERS = ("device is lost", "device was lost", "device lost", "devicelost")


def is_lost_error(error: BaseException) -> bool:
    """True when ``error`` says that the device was lost (a DeviceLostError or wgpu's own message)."""
    if isinstance(error, DeviceLostError):
        return True
    text = str(error).lower()
    return any(marker in text for marker in _LOST_MARKERS)


def _reason(error: BaseException) -> str:
    """The last line of a wgpu message (``Parent device is lost``) with the call that failed."""
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    if not lines:
        return type(error).__name__
    if len(lines) >= 2 and lines[-2].startswith("In "):
        return f"{lines[-1]}, {lines[-2][3:]}"
    return lines[-1]


class DeviceHealth:
    """Whether one GPUDevice was lost and why; shared by the storage, the queue and the server."""

    def __init__(self, device: Any, name: str = "") -> None:
        self.device = device
        #: The device's name for messages.
        self.name = name or "WebGPU device"
        #: Why the device was lost; None while it works.
        self.reason: str | None = None

    def error(self) -> DeviceLostError:
        """The DeviceLostError to raise for this (lost) device, saying what to do."""
        return DeviceLostError(
            f"the WebGPU device {self.name!r} was lost ({self.reason}); its memory, handles and queued "
            f"work are gone. Close this client and create a new one (cubeplug.client('webgpu')), then "
            f"upload the data again"
        )

    def check(self) -> None:
        """Raise DeviceLostError if the device was lost."""
        if self.reason is not None:
            raise self.error()

    def lost(self, error: BaseException) -> DeviceLostError | None:
        """A DeviceLostError (the device marked lost) when ``error`` comes from a lost device, else None.

        An error that does not say so (a buffer "has been destroyed", a failed mapping) is checked
        with a probe: a lost device destroys its buffers and fails their mappings.
        """
        if isinstance(error, DeviceLostError):
            self.mark("reported by another call")
            return error
        if is_lost_error(error):
            self.mark(_reason(error))
        elif self.reason is None:
            self._probe()
        return self.error() if self.reason is not None else None

    def raise_lost(self, error: BaseException) -> None:
        """Raise DeviceLostError (from ``error``) when ``error`` comes from a lost device (see
        :meth:`lost`); else return, for the caller to map ``error`` itself."""
        lost = self.lost(error)
        if lost is not None:
            raise lost from error

    def mark(self, reason: str) -> None:
        """Record that the device was lost (the first reason is kept)."""
        if self.reason is None:
            self.reason = reason

    def probe(self) -> None:
        """Raise DeviceLostError if the device is lost, asking wgpu with a tiny buffer if not known yet.

        wgpu-native is thread-safe and wgpu-py captures errors per thread, so a probe may run on a
        waiting thread while another thread holds the client's lock and encodes.
        """
        if self.reason is None:
            self._probe()
        self.check()

    def _probe(self) -> None:
        """Create and destroy a 4-byte buffer: a lost device refuses it (about 7 us on lavapipe)."""
        try:
            import wgpu

            self.device.create_buffer(size=4, usage=wgpu.BufferUsage.COPY_DST).destroy()
        except Exception as e:  # only a lost device matters here
            if is_lost_error(e):
                self.mark(_reason(e))
