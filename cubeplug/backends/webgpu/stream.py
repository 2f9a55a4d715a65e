"""The WebGPU device queue: batches of tasks encoded into one command encoder and submitted once.

WebGPU has one queue per device, so the backend returns no EventStreamBackend: the core
:class:`~cubeplug.core.scheduler.Scheduler` keeps the virtual streams and hands each stream's
queued tasks here as one batch. A batch becomes one command encoder with one compute pass for its
dispatches and one ``queue.submit`` (a write in the middle of a batch ends a segment: what was
encoded is submitted, then ``queue.write_buffer`` runs, both in queue order). The scalars of every
dispatch of a segment go into one arena buffer with one ``queue.write_buffer``, each dispatch
selecting its slot with a dynamic offset; identical scalar blocks share a slot.

Since the queue runs writes and submissions in order, a task's bindings may be released once it
is submitted. Reads copy into pooled MAP_READ staging buffers in the encoder and map them after the
submit; :class:`ReadFuture` completes on the caller's thread when it asks for the result, or on a
completer thread for callbacks, whichever comes first.

Threads: wgpu-py (0.31, 0.32) polls each device on a poll thread of its own, concurrently with every
other wgpu call, and ``GPUPromise.sync_wait()`` only waits for an event that the poll thread sets;
wgpu-native is thread-safe and wgpu-py captures validation errors per thread. So a read-back or a
sync may wait for its mapping with no lock held (the client's lock stays free for other threads'
launches), and needs no lock of the backend around the wait. Waits go in steps
(:func:`wait_promise`): a mapping pending when the device is destroyed is never resolved, so a wait
that takes long probes the device and ends with DeviceLostError instead of hanging.
"""

from __future__ import annotations

import queue
import threading
from concurrent.futures import Future
from typing import Any, cast

import numpy as np

from cubeplug.backends.webgpu.health import DeviceHealth
from cubeplug.core.errors import CubeplugError, LaunchError
from cubeplug.core.hostmem import host_copy

#: Task kinds, the first item of every task tuple.
DISPATCH, INDIRECT, COPY, WRITE, READ, TIMESTAMP = range(6)
#: Bytes of the scalar arena of one segment.
ARENA_BYTES = 64 << 10
#: Indirect dispatches per segment (each copies its 12-byte count into a slot of its own).
INDIRECT_SLOTS = 256
#: Timestamp queries in the ring.
QUERY_SLOTS = 256
#: Staging buffers kept per size class.
_STAGING_KEEP = 4
_STAGING_MAX_POOLED = 64 << 20
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


class StagingPool:
    """MAP_READ | COPY_DST buffers by power-of-two size class, reused across reads; thread-safe."""

    def __init__(self, device: Any, health: DeviceHealth | None = None) -> None:
        import wgpu

        self.device = device
        #: The device's health, checked by the reads that wait on this pool's buffers.
        self.health = health or DeviceHealth(device)
        self._usage = wgpu.BufferUsage.MAP_READ | wgpu.BufferUsage.COPY_DST
        self._free: dict[int, list[Any]] = {}
        self._lock = threading.Lock()

    def take(self, nbytes: int) -> Any:
        """A staging buffer of at least ``nbytes``."""
        size = max(256, 1 << (max(nbytes, 1) - 1).bit_length())
        with self._lock:
            free = self._free.get(size)
            if free:
                return free.pop()
        return self.device.create_buffer(size=size, usage=self._usage)

    def give(self, buffer: Any) -> None:
        """Return an unmapped staging buffer to the pool (or destroy it when the pool is full)."""
        size = buffer.size
        if size <= _STAGING_MAX_POOLED:
            with self._lock:
                free = self._free.setdefault(size, [])
                if len(free) < _STAGING_KEEP:
                    free.append(buffer)
                    return
        buffer.destroy()

    def clear(self) -> None:
        """Destroy every pooled buffer."""
        with self._lock:
            buffers = [b for free in self._free.values() for b in free]
            self._free.clear()
        for b in buffers:
            b.destroy()


class ReadFuture(Future[list[bytes]]):
    """Bytes read back through a staging buffer; completes on ``result()`` or on the completer thread.

    A future without parts is a fence: it only waits for its mapping. Before the bytes of a mapping
    are read the device is probed, since wgpu-native aborts the process when a buffer destroyed with
    a lost device is read, and a device destroyed while a mapping is pending may resolve it.
    """

    def __init__(self, parts: list[tuple[int, int]], nbytes: int, pool: StagingPool) -> None:
        super().__init__()
        #: (position in the staging buffer, size) of each handle; none for a fence.
        self.parts = parts
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
                result: list[bytes] = []
                if self.parts:
                    health.probe()
                    view = staging.read_mapped(0, self.nbytes, copy=False)
                    # bytearrays: numpy views of them are writable, so to_numpy needs no second copy.
                    # host_copy: one copy, no zero-fill, huge pages when large (core/hostmem.py).
                    data = np.frombuffer(view, dtype=np.uint8)
                    result = cast(
                        "list[bytes]", [host_copy(data[pos : pos + size]) for pos, size in self.parts]
                    )
                    del data
                    del view
                staging.unmap()
            except BaseException as e:
                self.staging = None
                lost = health.lost(e)
                self.set_exception(lost if lost is not None else e)
                return
            self.staging = None
            self._pool.give(staging)
            self.set_result(result)

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


class Completer:
    """A daemon thread that completes submitted reads, so callbacks and ``wait()`` fire unasked."""

    def __init__(self, name: str = "cubeplug-webgpu-reads") -> None:
        self._queue: queue.SimpleQueue[ReadFuture | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)
        self._thread.start()

    def put(self, future: ReadFuture) -> None:
        """Complete ``future`` in the background."""
        self._queue.put(future)

    def close(self) -> None:
        """Stop after the queued futures."""
        self._queue.put(None)
        self._thread.join(timeout=10)

    def _run(self) -> None:
        while True:
            future = self._queue.get()
            if future is None:
                return
            future.complete()
            del future


class WgpuQueue:
    """Encodes batches of tasks for one GPUDevice and submits each batch once."""

    def __init__(
        self, device: Any, offset_alignment: int, timestamps: bool, health: DeviceHealth | None = None
    ) -> None:
        import wgpu

        usage = wgpu.BufferUsage
        self.device = device
        #: Whether the device was lost: nothing is encoded or submitted once it is.
        self.health = health or DeviceHealth(device)
        self.queue = device.queue
        self.align = max(offset_alignment, 16)
        self.arena = device.create_buffer(size=ARENA_BYTES, usage=usage.STORAGE | usage.COPY_DST)
        self._arena_host = bytearray(ARENA_BYTES)
        self._indirect = device.create_buffer(size=INDIRECT_SLOTS * 16, usage=usage.INDIRECT | usage.COPY_DST)
        self.staging = StagingPool(device, self.health)
        self.completer = Completer()
        #: Errors of batches that failed on the device side, surfaced at the next flush or sync.
        self.errors: list[BaseException] = []
        #: ``[n]``: tasks of the batch being submitted that reached the device (the scheduler's
        #: :attr:`~cubeplug.core.scheduler.Scheduler.committed`, once the server shares it).
        self.committed: list[int] = [0]
        self.submits = 0
        self._fence_src = device.create_buffer(size=16, usage=usage.COPY_SRC)
        self.query_set: Any = None
        self._resolve: Any = None
        self._next_query = 0
        if timestamps:
            self.query_set = device.create_query_set(type="timestamp", count=QUERY_SLOTS)
            self._resolve = device.create_buffer(
                size=QUERY_SLOTS * 256, usage=usage.QUERY_RESOLVE | usage.COPY_SRC
            )

    # ------------------------------------------------------------------ batches
    def submit(self, batch: list[tuple[Any, ...]]) -> None:
        """Encode a batch into one command encoder (one compute pass per run of dispatches) and submit."""
        try:
            self.health.check()
            self._encode(batch)
        except Exception as e:
            error: CubeplugError | None = self.health.lost(e)
            if error is None:
                error = LaunchError(f"a batch of {len(batch)} queued tasks failed: {type(e).__name__}: {e}")
            if error is not e:
                error.__cause__ = e
            self.errors.append(error)
            self.fail_reads(batch, 0, error)  # reads of segments submitted before it complete normally

    @staticmethod
    def describe(tasks: list[tuple[Any, ...]]) -> str:
        """What dropped tasks were: launches, copies, writes and reads."""
        names = {DISPATCH: "launch", INDIRECT: "launch", COPY: "copy", WRITE: "write", READ: "read",
                 TIMESTAMP: "timestamp"}  # fmt: skip
        counts: dict[str, int] = {}
        for task in tasks:
            name = names.get(task[0], "task")
            counts[name] = counts.get(name, 0) + 1
        return ", ".join(f"{n} {what}{'es' if what == 'launch' and n > 1 else 's' if n > 1 else ''}"
                         for what, n in counts.items())  # fmt: skip

    @staticmethod
    def fail_reads(batch: list[tuple[Any, ...]], ran: int, error: BaseException) -> None:
        """Fail the reads of an interrupted batch that never had their mapping requested (those of
        segments submitted before the interruption included: nothing else would complete them)."""
        for task in batch:
            if task[0] in (READ, TIMESTAMP) and not task[2].attached:
                task[2].fail(error)

    def _encode(self, batch: list[tuple[Any, ...]]) -> None:
        device = self.device
        arena_host = self._arena_host
        align = self.align
        enc: Any = None
        cpass: Any = None
        used = 0
        slots: dict[bytes, int] = {}
        n_indirect = 0
        last_pipe: Any = None
        last_bg: Any = None
        last_off = -1
        reads: list[tuple[Any, ReadFuture]] = []
        for i, task in enumerate(batch):
            op = task[0]
            if op in (DISPATCH, INDIRECT):
                sb = task[3]
                off = -1
                if sb is not None:
                    off = slots.get(sb, -1)
                    if off < 0:
                        n = len(sb)
                        if used + n > ARENA_BYTES:
                            if cpass is not None:
                                cpass.end()
                                cpass = None
                            self._submit_segment(enc, used, reads, i)
                            enc = None
                            used = 0
                            n_indirect = 0
                            slots = {}
                        off = used
                        arena_host[off : off + n] = sb
                        used = off + n + (-n) % align
                        slots[sb] = off
                if op == INDIRECT:
                    if n_indirect == INDIRECT_SLOTS:
                        if cpass is not None:
                            cpass.end()
                            cpass = None
                        self._submit_segment(enc, used, reads, i)
                        enc = None
                        used = 0
                        n_indirect = 0
                        slots = {}
                        if sb is not None:
                            arena_host[0 : len(sb)] = sb
                            used = len(sb) + (-len(sb)) % align
                            slots[sb] = off = 0
                    if cpass is not None:
                        cpass.end()
                        cpass = None
                    if enc is None:
                        enc = device.create_command_encoder()
                    enc.copy_buffer_to_buffer(task[4], task[5], self._indirect, n_indirect * 16, 12)
                if cpass is None:
                    if enc is None:
                        enc = device.create_command_encoder()
                    cpass = enc.begin_compute_pass()
                    last_pipe = last_bg = None
                    last_off = -1
                pipe = task[1]
                if pipe is not last_pipe:
                    cpass.set_pipeline(pipe)
                    last_pipe = pipe
                bg = task[2]
                if bg is not last_bg or off != last_off:
                    if off >= 0:
                        cpass.set_bind_group(0, bg, [off])
                    else:
                        cpass.set_bind_group(0, bg)
                    last_bg = bg
                    last_off = off
                if op == DISPATCH:
                    cpass.dispatch_workgroups(task[4], task[5], task[6])
                else:
                    cpass.dispatch_workgroups_indirect(self._indirect, n_indirect * 16)
                    n_indirect += 1
                continue
            if cpass is not None:
                cpass.end()
                cpass = None
            if op == WRITE:
                if enc is not None or used:
                    self._submit_segment(enc, used, reads, i)
                    enc = None
                    used = 0
                    n_indirect = 0
                    slots = {}
                self.queue.write_buffer(task[1], task[2], task[3])
                self.committed[0] = i + 1
                continue
            if enc is None:
                enc = device.create_command_encoder()
            if op == COPY:
                enc.copy_buffer_to_buffer(task[1], task[2], task[3], task[4], task[5])
            elif op == READ:
                future: ReadFuture = task[2]
                if future.nbytes:
                    staging = future.staging = self.staging.take(future.nbytes)
                    pos = 0
                    for buffer, offset, size in task[1]:
                        if size:
                            enc.copy_buffer_to_buffer(buffer, offset, staging, pos, size)
                        pos += size
                    reads.append((staging, future))
                else:
                    future.complete()
            elif op == TIMESTAMP:
                index = task[1]
                tpass = enc.begin_compute_pass(
                    timestamp_writes={"query_set": self.query_set, "end_of_pass_write_index": index}
                )
                tpass.end()
                enc.resolve_query_set(self.query_set, index, 1, self._resolve, index * 256)
                future = task[2]
                staging = future.staging = self.staging.take(8)
                enc.copy_buffer_to_buffer(self._resolve, index * 256, staging, 0, 8)
                reads.append((staging, future))
        if cpass is not None:
            cpass.end()
        if enc is not None or used:
            self._submit_segment(enc, used, reads, len(batch))

    def _submit_segment(
        self, enc: Any, used: int, reads: list[tuple[Any, ReadFuture]], done: int = 0
    ) -> None:
        """Write the segment's scalars, submit its commands, then map its read-backs; the batch's
        first ``done`` tasks have then reached the device (:attr:`committed`)."""
        if used:
            self.queue.write_buffer(self.arena, 0, self._arena_host, 0, used)
        if enc is not None:
            commands = enc.finish()  # raises on a lost device, before the submit that would abort
            self.health.check()
            self.queue.submit([commands])
            self.committed[0] = done
            self.submits += 1
        elif done:
            self.committed[0] = done
        if reads:
            for staging, future in reads:
                future.attach(map_for_read(staging, future.nbytes + (-future.nbytes) % 4))
                self.completer.put(future)
            reads.clear()

    # ------------------------------------------------------------------ waits and markers
    def next_query(self) -> int:
        """The next timestamp query index of the ring."""
        index = self._next_query
        self._next_query = (index + 1) % QUERY_SLOTS
        return index

    def fence_task(self) -> tuple[tuple[Any, ...], ReadFuture]:
        """A fence as a READ task and its future, which completes once the batch that holds it has run."""
        future = ReadFuture([], 4, self.staging)
        return (READ, [(self._fence_src, 0, 4)], future, ()), future

    def fence(self) -> ReadFuture:
        """A future that completes once everything submitted so far has run (the "work done" event).

        It is the mapping of a tiny staging buffer copied after the last submission, which works on
        wgpu 0.31 and 0.32 alike (0.32's ``on_submitted_work_done`` is broken). A lost device raises
        DeviceLostError here or from the future.
        """
        health = self.health
        health.check()
        future = ReadFuture([], 4, self.staging)
        try:
            enc = self.device.create_command_encoder()
            staging = future.staging = self.staging.take(4)
            enc.copy_buffer_to_buffer(self._fence_src, 0, staging, 0, 4)
            self._submit_segment(enc, 0, [(staging, future)])
        except Exception as e:
            lost = health.lost(e)
            if lost is not None:
                raise lost from e
            raise
        return future

    def wait_idle(self) -> None:
        """Block until everything submitted so far has run."""
        self.fence().result()

    def close(self) -> None:
        """Stop the completer thread and release the queue's own buffers."""
        self.completer.close()
        self.staging.clear()
        for b in (self.arena, self._indirect, self._fence_src, self._resolve):
            if b is not None:
                b.destroy()
