"""WebGPU read-backs: mappable staging buffers, their mapping, and the futures reads return.

Reads copy into pooled MAP_READ staging buffers in the encoder (:mod:`~cubeplug.backends.webgpu.queue`)
and map them after the submit; :class:`ReadFuture` completes on the caller's thread when it asks for
the result, or on the queue's completer thread for callbacks, whichever comes first.

Threads: wgpu-py (0.31, 0.32) polls each device on a poll thread of its own, concurrently with every
other wgpu call, and ``GPUPromise.sync_wait()`` only waits for an event that the poll thread sets;
wgpu-native is thread-safe and wgpu-py captures validation errors per thread. So a read-back or a
sync may wait for its mapping with no lock held (the client's lock stays free for other threads'
launches), and needs no lock of the backend around the wait. Waits go in steps
(:func:`wait_promise`): a mapping pending when the device is destroyed is never resolved, so a wait
that takes long probes the device and ends with DeviceLostError instead of hanging.
"""

from __future__ import annotations

import threading
from concurrent.futures import Future
from typing import Any, cast

import numpy as np

from cubeplug.backends.webgpu.health import DeviceHealth
from cubeplug.plugin import CubeplugError, LaunchError, StagedRead, host_copy
from cubeplug.plugin import StagingPool as ToolkitPool

#: Staging buffers kept per size class, and the largest class kept.
STAGING_KEEP = 4
STAGING_MAX_POOLED = 64 << 20
#: Smallest staging buffer.
MIN_STAGING = 256
#: First and longest pause between checks for a lost device while waiting for a mapping (seconds).
WAIT_STEP = 0.05
WAIT_STEP_MAX = 1.0


#: The map mode of read-backs: wgpu-py's "READ_NOSYNC" where it has it (see :func:`map_for_read`).
_read_mode: Any = "READ_NOSYNC"


def map_for_read(staging: Any, nbytes: int) -> Any:
    """``staging.map_async`` for reading, without the empty submission wgpu-py adds before a read map.

    wgpu-py (0.31, 0.32) submits an empty command buffer before mapping for read, to flush data
    written through a mapping (wgpu-native issue 305); staging buffers are only written by copies
    already submitted, so that submit is not needed, and it would block while the device is busy on
    drivers that keep one submission in flight (lavapipe), under the client's lock. wgpu-py reads
    its own buffers the same way (mode "READ_NOSYNC"); a version without that mode gets READ.
    """
    global _read_mode
    try:
        return staging.map_async(_read_mode, 0, nbytes)
    except (ValueError, KeyError, TypeError, AttributeError):
        if _read_mode != "READ_NOSYNC":
            raise
        import wgpu

        promise = staging.map_async(wgpu.MapMode.READ, 0, nbytes)  # raises too if the range was wrong
        _read_mode = wgpu.MapMode.READ
        return promise


def wait_promise(promise: Any, health: DeviceHealth | None = None) -> Any:
    """``promise.sync_wait()``, probing ``health`` at growing intervals while it is pending.

    A device lost while the promise is pending ends the wait with DeviceLostError. wgpu-py has no
    public timed wait; the native backend's promises (0.31, 0.32) keep a ``threading.Event`` set
    when they resolve, and without one this falls back to a plain ``sync_wait()``.
    """
    event = getattr(promise, "_thread_event", None)
    if health is not None and event is not None and hasattr(event, "wait"):
        step = WAIT_STEP
        while not event.wait(step):
            health.probe()
            step = min(2 * step, WAIT_STEP_MAX)
    return promise.sync_wait()



class StagingPool(ToolkitPool[Any]):
    """MAP_READ | COPY_DST buffers by power-of-two size class, reused across reads; thread-safe."""

    def __init__(self, device: Any, health: DeviceHealth | None = None) -> None:
        import wgpu

        super().__init__(MIN_STAGING, keep_per_class=STAGING_KEEP, largest_kept=STAGING_MAX_POOLED)
        self.device = device
        #: The device's health, checked by the reads that wait on this pool's buffers.
        self.health = health or DeviceHealth(device)
        self._usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST

    def take(self, nbytes: int) -> Any:
        """A staging buffer of at least ``nbytes``."""
        size = self.size_class(nbytes)
        buffer = self.reuse(size)
        if buffer is None:
            buffer = self.device.create_buffer(size=size, usage=self._usage)
        return buffer

    def give(self, buffer: Any) -> None:
        """Return an unmapped staging buffer to the pool (or destroy it when the pool is full)."""
        if not self.keep_idle(buffer, buffer.size):
            buffer.destroy()

    def clear(self) -> None:
        """Destroy every pooled buffer."""
        for buffer in self.drain():
            buffer.destroy()


class ReadFuture(Future[list[bytes]]):
    """Bytes read back through a staging buffer; completes on ``result()`` or on the completer thread.

    A future without parts is a fence: it only waits for its mapping. Before the bytes of a mapping
    are read the device is probed, since wgpu-native aborts the process when a buffer destroyed with
    a lost device is read, and a device destroyed while a mapping is pending may resolve it.
    """

    def __init__(
        self, parts: list[tuple[int, int]], nbytes: int, pool: StagingPool, lend: bool = False
    ) -> None:
        super().__init__()
        #: (position in the staging buffer, size) of each handle; none for a fence.
        self.parts = parts
        #: The result is a StagedRead over the mapping of the one part (``read_staged``), which its
        #: release unmaps and gives back, instead of a copy of each part.
        self.lend = lend
        self.nbytes = nbytes
        self.staging: Any = None
        self._pool = pool
        self._promise: Any = None
        self._done_lock = threading.Lock()
        self._wait_lock = threading.Lock()

    def attach(self, promise: Any) -> None:
        """The staging buffer's map promise, once its copy was submitted."""
        self._promise = promise

    @property
    def attached(self) -> bool:
        """True once the copy into the staging buffer was submitted and its mapping requested."""
        return self._promise is not None

    def fail(self, error: BaseException) -> None:
        """Fail the read (its batch could not be submitted) and give its staging buffer back."""
        with self._done_lock:
            if self.done():
                return
            if self.staging is not None:
                self._pool.give(self.staging)
                self.staging = None
            self.set_exception(error)

    def complete(self) -> None:
        """Wait for the mapping, copy the bytes out and give the staging buffer back (idempotent)."""
        if self.done():
            return
        promise = self._promise
        health = self._pool.health
        error: BaseException | None = None
        if promise is not None:
            # One thread waits on the promise (the caller or the completer); the other finds it done.
            with self._wait_lock:
                if self.done():
                    return
                try:
                    wait_promise(promise, health)
                except Exception as e:  # reported through the future
                    error = e
                # A KeyboardInterrupt (or any BaseException) propagates and leaves the read pending:
                # the mapping is still under way, so its staging buffer must not go back to the pool;
                # the completer thread, or the next result(), completes it.
        with self._done_lock:
            if self.done():
                return
            staging = self.staging
            if error is not None or (promise is None and self.nbytes):
                self.staging = None
                lost = health.lost(error) if error is not None else None
                if staging is not None and lost is None:
                    self._pool.give(staging)
                if lost is not None:
                    self.set_exception(lost)
                elif isinstance(error, CubeplugError):
                    self.set_exception(error)
                else:
                    self.set_exception(LaunchError(f"reading back from the device failed: {error}"))
                return
            if staging is None:
                self.set_result(cast("list[bytes]", [bytearray(size) for _, size in self.parts]))
                return
            try:
                out: Any
                if self.lend:  # the mapping itself, lent until the StagedRead's release
                    health.probe()
                    pos, size = self.parts[0]
                    view = staging.read_mapped(0, self.nbytes, copy=False)[pos : pos + size]
                    out = StagedRead(view, lambda: self._give_back(staging))
                else:
                    out = []
                    if self.parts:
                        health.probe()
                        view = staging.read_mapped(0, self.nbytes, copy=False)
                        # bytearrays: numpy views of them are writable, so to_numpy needs no second
                        # copy. host_copy: one copy, no zero-fill, huge pages when large (hostmem.py).
                        data = np.frombuffer(view, dtype=np.uint8)
                        out = [host_copy(data[pos : pos + size]) for pos, size in self.parts]
                        del data
                        del view
                    staging.unmap()
            except BaseException as e:
                self.staging = None
                lost = health.lost(e)
                self.set_exception(lost if lost is not None else e)
                return
            self.staging = None
            if not self.lend:
                self._pool.give(staging)
            self.set_result(out)

    def _give_back(self, staging: Any) -> None:
        """A lent mapping's release: unmap it (its views were dropped) and give the buffer back."""
        try:
            staging.unmap()
        except Exception:
            staging.destroy()  # not reused: a buffer whose unmap failed may stay mapped
            return
        self._pool.give(staging)

    def result(self, timeout: float | None = None) -> Any:
        """The bytes of each handle (completed inline when waiting without a timeout)."""
        if timeout is None:
            self.complete()
        return super().result(timeout)

    def exception(self, timeout: float | None = None) -> BaseException | None:
        """The exception of a failed read."""
        if timeout is None:
            self.complete()
        return super().exception(timeout)
