"""OpenCL storage: device pages of ``cl.Buffer``, slices bound as cached sub-buffers.

Every page is allocated on the device when :meth:`OpenCLStorage.alloc` is called: the buffer is
migrated to the device and the migration waited for, so that a driver that allocates lazily
(NVIDIA) reports out-of-memory there, as an :class:`OutOfMemoryError`, never at first use. The
alignment of pages and slices is the device's ``MEM_BASE_ADDR_ALIGN`` (at least 256 bytes), which is
what ``clCreateSubBuffer`` needs of a slice's offset.

The pinned host memory of transfers is :mod:`~cubeplug.backends.opencl.staging`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.plugin import (
    BufferTooBig,
    ComputeStorage,
    MemoryProperties,
    OutOfMemoryError,
    StorageHandle,
    next_storage_id,
)

#: Smallest alignment the backend uses, whatever the device reports.
MIN_ALIGNMENT = 256
#: Sub-buffers kept per page before the page's cache is reset.
SUB_BUFFER_CACHE = 4096


def alignment_of(ctx: DeviceContext) -> int:
    """The byte alignment of pages and slices on this device."""
    return max(MIN_ALIGNMENT, int(ctx.limits["base_address_alignment"]))


def memory_properties(ctx: DeviceContext) -> MemoryProperties:
    """Pages up to the device's largest allocation, aligned for sub-buffers."""
    limits = ctx.limits
    return MemoryProperties(
        max_page_size=int(limits["max_allocation"]),
        alignment=alignment_of(ctx),
        total_memory=int(limits["global_memory"]),
    )


class OpenCLStorage(ComputeStorage):
    """Device pages (``cl.Buffer``) by storage id, with a cache of the sub-buffers bound from them."""

    def __init__(self, ctx: DeviceContext) -> None:
        self.ctx = ctx
        self.alignment = alignment_of(ctx)
        self.max_allocation = int(ctx.limits["max_allocation"])
        self.total = int(ctx.limits["global_memory"])
        self._pages: dict[int, Any] = {}
        self._sizes: dict[int, int] = {}
        self._subs: dict[int, dict[tuple[int, int], Any]] = {}
        self._reserved = 0
        #: Called before a page's sub-buffers are released, so that whatever else holds them (kernels
        #: keep the buffers they bound last) lets them go first; set by the server.
        self.forget_bindings: Callable[[], None] | None = None

    # ------------------------------------------------------------------ ComputeStorage
    def alloc(self, size: int) -> StorageHandle:
        """Allocate a page of ``size`` bytes on the device now; OutOfMemoryError if it has no room."""
        import pyopencl as cl

        if size > self.max_allocation:
            raise BufferTooBig(size, self.max_allocation)
        nbytes = max(size, self.alignment)  # OpenCL has no empty buffers
        if self._reserved + nbytes > self.total:
            raise self._oom(size, f"the device has {self.total} B of global memory")
        try:
            buf = cl.Buffer(self.ctx.context, cl.mem_flags.READ_WRITE, nbytes)
            # Force the allocation now: lazy drivers would otherwise fail at the first launch.
            cl.enqueue_migrate_mem_objects(
                self.ctx.alloc_queue, [buf], cl.mem_migration_flags.CONTENT_UNDEFINED
            ).wait()
        except MemoryError as e:
            raise self._oom(size, "host memory exhausted") from e
        except cl.Error as e:
            raise self._oom(size, f"{e.routine}: {code_name(e)}") from e
        sid = next_storage_id()
        self._pages[sid] = buf
        self._sizes[sid] = nbytes
        self._reserved += nbytes
        return StorageHandle(sid, 0, size)

    def dealloc(self, id: int) -> None:
        """Release a page and its sub-buffers; OpenCL keeps them alive for commands still queued.

        The sub-buffers go first (kernels let go of those they bound last before), then the page:
        no sub-buffer outlives its page in this storage.
        """
        if id not in self._pages:
            return
        subs = self._subs.pop(id, None)
        if subs is not None:
            if self.forget_bindings is not None:
                self.forget_bindings()
            _release_subs(subs)
            del subs
        del self._pages[id]
        self._reserved -= self._sizes.pop(id)

    def get(self, handle: StorageHandle) -> Any:
        """The ``cl.Buffer`` to bind for a region: the page itself (a region at the page's start) or a
        cached sub-buffer."""
        return self.bind(handle.id, handle.offset, handle.size)

    def memory_info(self) -> tuple[int, int] | None:
        """(free, total) global memory as far as this storage knows (OpenCL reports no free figure)."""
        return max(0, self.total - self._reserved), self.total

    @property
    def pages(self) -> dict[int, Any]:
        """The pages by storage id (launches read them directly: a region at a page's start binds it)."""
        return self._pages

    # ------------------------------------------------------------------ binding (launch hot path)
    def bind(self, page: int, offset: int, size: int) -> Any:
        """A buffer that starts at ``offset`` of ``page`` and covers ``size`` bytes (offset aligned by
        the caller): the page itself when the region starts the page, else a cached sub-buffer.

        A kernel does not see the size of its buffers, so a region at offset 0 binds the whole page
        rather than a sub-buffer. That is also what keeps NVIDIA's driver alive: several sub-buffers
        at origin 0 of one page (slices of different sizes lent at the page's start over time), used
        by kernels, segfault ``clReleaseMemObject`` when they are released.

        A sub-buffer costs kernels nothing measurable against a buffer of their own (issue 19:
        gemm and atax, paired, within 1 % on PoCL 5.0 and NVIDIA 580, within the run's noise on
        PoCL 3.1; ``bench/probes/subbuffer_penalty.py``), while binding the page with the offset as
        a kernel argument made atax 1.25x slower on NVIDIA: hence sub-buffers (docs/memory.md).
        """
        if offset == 0 or size == 0:
            return self._pages[page]
        subs = self._subs.get(page)
        if subs is not None:
            buf = subs.get((offset, size))
            if buf is not None:
                return buf
        buf = self._pages[page]
        if subs is None or len(subs) >= SUB_BUFFER_CACHE:
            if subs is not None:
                _release_subs(subs)  # a kernel may still hold one it bound last: that one lives on
            subs = self._subs[page] = {}
        sub = subs[(offset, size)] = buf.get_sub_region(offset, size)
        return sub

    def page(self, page: int) -> Any:
        """The whole ``cl.Buffer`` of a page (for copies, which take byte offsets)."""
        return self._pages[page]

    def reserved(self) -> int:
        """Bytes held in pages."""
        return self._reserved

    def _oom(self, size: int, detail: str) -> OutOfMemoryError:
        return OutOfMemoryError(
            size,
            in_use=0,
            reserved=self._reserved,
            limit=None,
            device_free=max(0, self.total - self._reserved),
            device_total=self.total,
            detail=f"{self.ctx.name}: {detail}",
        )

    def close(self) -> None:
        """Release every page, each after its sub-buffers (see :meth:`dealloc`)."""
        if self._subs and self.forget_bindings is not None:
            self.forget_bindings()
        for subs in self._subs.values():
            _release_subs(subs)
        self._subs.clear()
        self._pages.clear()
        self._sizes.clear()
        self._reserved = 0


def _release_subs(subs: dict[tuple[int, int], Any]) -> None:
    """Release a page's sub-buffers newest first.

    NVIDIA's OpenCL driver (580) segfaults in ``clReleaseMemObject`` when, of two sub-buffers bound
    by kernels, such as a handle's region and a view of it ending at the same byte, the one created
    first is released first; releasing them in the reverse order of their creation is clean
    (``bench/probes/opencl_release_views.py``). ``dict.popitem`` takes the newest entry.
    """
    while subs:
        subs.popitem()


def code_name(error: Any) -> str:
    """The symbolic name of a PyOpenCL error's status code."""
    import pyopencl as cl

    code = getattr(error, "code", None)
    for name in dir(cl.status_code):
        if not name.startswith("_") and getattr(cl.status_code, name) == code:
            return name
    return str(code)
