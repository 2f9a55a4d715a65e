"""The WebGPU device queue: batches of tasks encoded into one command encoder and submitted once.

WebGPU has one queue per device, so the backend returns no EventStreamBackend: the core
:class:`~cubeplug.core.scheduler.Scheduler` keeps the virtual streams and hands each stream's
queued tasks here as one batch. A batch becomes one command encoder with one compute pass for its
dispatches and one ``queue.submit`` (a write in the middle of a batch ends a segment: what was
encoded is submitted, then ``queue.write_buffer`` runs, both in queue order); copies and clears join
the encoder between the compute passes. The scalars of every
dispatch of a segment go into one arena buffer with one ``queue.write_buffer``, each dispatch
selecting its slot with a dynamic offset; identical scalar blocks share a slot.

Since the queue runs writes and submissions in order, a task's bindings may be released once it
is submitted. Reads copy into pooled staging buffers in the encoder and map them after the submit
(:mod:`~cubeplug.backends.webgpu.reads`); the toolkit's completer thread completes them for
callbacks.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cubeplug.backends.webgpu.health import DeviceHealth
from cubeplug.backends.webgpu.reads import ReadFuture, StagingPool, map_for_read
from cubeplug.plugin import Completer, CubeplugError, LaunchError

#: Task kinds, the first item of every task tuple (launches first: ``op <= RUN`` is a launch).
#: RUN is several dispatches of one pipeline, bind group and scalar block, ``(RUN, pipeline,
#: bind_group, block, ((x, y, z), ...))``, which only a replay holds. COPY is one
#: ``copy_buffer_to_buffer``; COPY_VIA two, through a scratch buffer (a copy within one buffer,
#: which ``copy_buffer_to_buffer`` refuses); CLEAR a ``clear_buffer`` (zeros); REPLAY a captured
#: graph's tasks, encoded ``times`` times in place: ``(REPLAY, tasks, times, keep)``.
DISPATCH, INDIRECT, RUN, COPY, WRITE, READ, TIMESTAMP, COPY_VIA, CLEAR, REPLAY = range(10)
#: Bytes of the scalar arena of one segment.
ARENA_BYTES = 64 << 10
#: Indirect dispatches per segment (each copies its 12-byte count into a slot of its own).
INDIRECT_SLOTS = 256
#: Timestamp queries in the ring.
QUERY_SLOTS = 256


class Segment:
    """What the segment of a batch being encoded holds: its encoder (None until a command needs
    one), the arena bytes its scalar blocks use and their offsets, the indirect count slots used, and
    the read-backs to map once it is submitted."""

    __slots__ = ("enc", "n_indirect", "reads", "slots", "used")

    def __init__(self) -> None:
        self.enc: Any = None
        self.used = 0
        self.slots: dict[bytes, int] = {}
        self.n_indirect = 0
        self.reads: list[tuple[Any, ReadFuture]] = []


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
        #: Completes the read-backs for callbacks (the caller completes them itself in ``result()``).
        self.completer = Completer("cubeplug-webgpu-reads", ReadFuture.complete)
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
        names = {DISPATCH: "launch", INDIRECT: "launch", RUN: "launch", COPY: "copy", COPY_VIA: "copy",
                 WRITE: "write", READ: "read", TIMESTAMP: "timestamp", CLEAR: "fill",
                 REPLAY: "replay"}  # fmt: skip
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
        """Encode and submit ``batch`` segment by segment."""
        seg = Segment()
        self._encode_run(seg, batch, -1)
        if seg.enc is not None or seg.used:
            self._submit_segment(seg.enc, seg.used, seg.reads, len(batch))

    def _encode_run(self, seg: Segment, tasks: Sequence[tuple[Any, ...]], at: int) -> None:
        """Encode ``tasks`` into ``seg``: a batch (``at`` is -1), or the tasks of a REPLAY, the
        batch's task ``at`` (a segment ended inside it counts the tasks before ``at`` as done).
        Dispatches are encoded here, with the compute pass and what it last bound in locals (this
        loop runs once per launch); every other task, and what ends a segment, in the methods below."""
        cpass: Any = None
        last_pipe: Any = None
        last_bg: Any = None
        last_off = -1
        for i, task in enumerate(tasks):
            op = task[0]
            if op > RUN:
                if cpass is not None:
                    cpass.end()
                    cpass = None
                if op == REPLAY:
                    place = i if at < 0 else at
                    run = task[1]
                    for _ in range(task[2]):
                        self._encode_run(seg, run, place)
                else:
                    self._encode_other(seg, task, i if at < 0 else at)
                continue
            sb = task[3]
            off = -1
            if sb is not None:
                off = seg.slots.get(sb, -1)
                if off < 0:
                    if seg.used + len(sb) > ARENA_BYTES:
                        if cpass is not None:
                            cpass.end()
                            cpass = None
                        self._restart(seg, i if at < 0 else at)
                    off = self._place(seg, sb)
            if op == INDIRECT:
                if cpass is not None:
                    cpass.end()
                    cpass = None
                off = self._indirect_count(seg, task, off, i if at < 0 else at)
            if cpass is None:
                if seg.enc is None:
                    seg.enc = self.device.create_command_encoder()
                cpass = seg.enc.begin_compute_pass()
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
            elif op == RUN:  # a replay's dispatches: nothing but the call per dispatch
                dispatch = cpass.dispatch_workgroups
                for x, y, z in task[4]:
                    dispatch(x, y, z)
            else:
                cpass.dispatch_workgroups_indirect(self._indirect, seg.n_indirect * 16)
                seg.n_indirect += 1
        if cpass is not None:
            cpass.end()

    def _restart(self, seg: Segment, done: int) -> None:
        """Submit what ``seg`` encoded (the batch's first ``done`` tasks) and start it anew, empty."""
        self._submit_segment(seg.enc, seg.used, seg.reads, done)
        seg.enc = None
        seg.used = 0
        seg.n_indirect = 0
        seg.slots = {}

    def _place(self, seg: Segment, block: bytes) -> int:
        """Put a scalar block in the segment's arena; its offset there."""
        off = seg.used
        n = len(block)
        self._arena_host[off : off + n] = block
        seg.used = off + n + (-n) % self.align
        seg.slots[block] = off
        return off

    def _indirect_count(self, seg: Segment, task: tuple[Any, ...], off: int, done: int) -> int:
        """Copy an indirect dispatch's count into its slot, in a new segment when the slots are full
        (outside a compute pass); the offset of its scalar block, which moves with a new segment."""
        if seg.n_indirect == INDIRECT_SLOTS:
            self._restart(seg, done)
            if task[3] is not None:
                off = self._place(seg, task[3])
        if seg.enc is None:
            seg.enc = self.device.create_command_encoder()
        seg.enc.copy_buffer_to_buffer(task[4], task[5], self._indirect, seg.n_indirect * 16, 12)
        return off

    def _encode_other(self, seg: Segment, task: tuple[Any, ...], i: int) -> None:
        """Encode a task that is no launch (outside a compute pass): a write ends the segment and
        runs in queue order; copies, read-backs and timestamps join the segment's encoder."""
        op = task[0]
        if op == WRITE:
            if seg.enc is not None or seg.used:
                self._restart(seg, i)
            self.queue.write_buffer(task[1], task[2], task[3])
            self.committed[0] = i + 1
            return
        if seg.enc is None:
            seg.enc = self.device.create_command_encoder()
        enc = seg.enc
        if op == COPY:
            enc.copy_buffer_to_buffer(task[1], task[2], task[3], task[4], task[5])
        elif op == COPY_VIA:  # (COPY_VIA, src, src_offset, dst, dst_offset, size, scratch, keep)
            enc.copy_buffer_to_buffer(task[1], task[2], task[6], 0, task[5])
            enc.copy_buffer_to_buffer(task[6], 0, task[3], task[4], task[5])
        elif op == CLEAR:  # (CLEAR, buffer, offset, size, keep)
            enc.clear_buffer(task[1], task[2], task[3])
        elif op == READ:
            future: ReadFuture = task[2]
            if future.nbytes:
                staging = future.staging = self.staging.take(future.nbytes)
                pos = 0
                for buffer, offset, size in task[1]:
                    if size:
                        enc.copy_buffer_to_buffer(buffer, offset, staging, pos, size)
                    pos += size
                seg.reads.append((staging, future))
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
            seg.reads.append((staging, future))


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
                self.completer.submit(future)
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
            health.raise_lost(e)
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
