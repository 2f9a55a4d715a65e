"""Memory management: the pool ladder over one storage, allocation modes, cleanup and the OOM policy."""

from __future__ import annotations

import contextlib
import gc
import logging
import math
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from cubeplug.core.errors import BufferTooBig, OutOfMemoryError, ValidationError
from cubeplug.core.memory.limit import MemoryLimit
from cubeplug.core.memory.options import AllocationMode, PoolOptions, default_pools
from cubeplug.core.memory.pages import PageSource
from cubeplug.core.memory.pools import ExclusivePool, MemoryPool, PersistentPool, SlicedPool
from cubeplug.core.memory.slice_token import SliceToken
from cubeplug.core.memory.usage import MemoryUsage, PoolReport
from cubeplug.core.storage import ComputeStorage, MemoryProperties

log = logging.getLogger("cubeplug.memory")

#: Persistent-memory policies: windows honoured, ignored, or every reservation persistent.
PERSISTENT_POLICIES = ("enabled", "disabled", "enforced")
#: How many distinct sizes keep their routes cached.
_ROUTE_CACHE = 4096


class _PoolsFull(OutOfMemoryError):
    """Every pool that takes a size is capped (``max_pages``) and full."""


class MemoryManagement:
    """Reserves slices for one stream (or one device) from a ladder of pools over one storage.

    Not thread-safe by itself: its owner calls :meth:`reserve`, :meth:`cleanup`, :meth:`usage`
    and the mode methods under one lock. Tokens may die in any thread; each pool notices it
    through their finalizers (see :mod:`cubeplug.core.memory.slice_token`).

    Routing: a free persistent slice of the exact padded size first, then the first pool of the
    ladder that accepts the size; a capped full pool, or one whose page the device or the limit
    refuses, spills to the next pool that accepts the size. Size-0 reservations go to the
    zero-size exclusive pool (a page of ``alignment`` bytes each, a zero-size region of it).

    Out of memory (no pool could get a page): ``gc.collect()`` (tokens in reference cycles),
    ``release_queued(True)``, cleanup(explicit=True), ``reclaim()`` (where an owner frees the free
    pages of the other managements that share the device or the limit), ``storage.flush()``
    (deferred frees), and one retry; then ``on_oom(requested, in_use, reserved)`` and
    OutOfMemoryError with the figures.

    Before a pool grows, ``release_queued(False)`` (when given) lets a backend whose queued tasks
    hold their bindings' memory (the single-queue scheduler) submit them: it returns True when that
    may have freed memory, and the reservation looks for free memory again first. Without it, a loop
    that drops each output while its task is queued gets a new page per call (a 1 GiB transpose
    output each call on WebGPU, each zero-initialised by wgpu at its first use). On the
    out-of-memory path, ``release_queued(True)`` may also wait until the queued work ran (the CPU
    backend's worker lets a task's memory go only once it ran it).

    Every ``dealloc_period // 5`` reservations, each pool runs one idle check (exclusive pools
    free pages idle for five checks in a row).
    """

    def __init__(
        self,
        storage: ComputeStorage,
        properties: MemoryProperties,
        *,
        limit: MemoryLimit | None = None,
        pools: Sequence[PoolOptions] | None = None,
        dealloc_period: int = 1000,
        persistent: str = "enabled",
        on_oom: Callable[[int, int, int], None] | None = None,
        reclaim: Callable[[], object] | None = None,
        release_queued: Callable[[bool], bool] | None = None,
    ) -> None:
        if persistent not in PERSISTENT_POLICIES:
            raise ValidationError(
                f"persistent memory policy is one of {', '.join(PERSISTENT_POLICIES)}, got {persistent!r}"
            )
        if isinstance(dealloc_period, bool) or not isinstance(dealloc_period, int) or dealloc_period < 1:
            raise ValidationError(f"dealloc_period is a positive reservation count, got {dealloc_period!r}")
        self.storage = storage
        self.properties = properties
        self.limit = limit
        #: Byte alignment of every slice offset and size: a multiple of the storage's and the device's.
        self.alignment = math.lcm(max(1, storage.alignment), max(1, properties.alignment))
        self.max_page_size = properties.max_page_size
        self._source = PageSource(storage, limit, self.alignment)
        options = (
            default_pools(self.max_page_size, self.alignment, properties.max_slice_size)
            if pools is None
            else list(pools)
        )
        #: The ladder, in routing order.
        self.pool_options: tuple[PoolOptions, ...] = tuple(options)
        self._pools: list[MemoryPool] = [self._build(o) for o in options]
        self._persistent = PersistentPool(self._source, self.max_page_size)
        self._routes: dict[int, tuple[MemoryPool, ...]] = {}
        #: Sizes a sliced pool may lend again without a call: ``size -> SlicedPool.reuse_entry(size)``,
        #: filled by :meth:`reserve` only while no persistent memory is in play, emptied as soon as
        #: some is. The client's allocation hot path (``ComputeServer.empty_path``) lends from it
        #: directly, without the client's lock, counting each reservation in :attr:`until_check`
        #: while that stays above 1.
        self.reuse: dict[int, tuple[deque[Any], int, Callable[[Any], object]]] = {}
        self._policy = persistent
        self._modes: list[AllocationMode] = []
        self._persistent_mode = persistent == "enforced"
        self._on_oom = on_oom
        self._reclaim = reclaim
        self._release_queued = release_queued
        #: Reservations per deallocation period (an idle check every fifth of it).
        self.dealloc_period = dealloc_period
        self._check_period = max(1, dealloc_period // 5)
        #: Reservations left until the pools' next idle check (the check runs at the one that makes it 0).
        self.until_check = self._check_period
        self._checks = 0

    def _build(self, options: PoolOptions) -> MemoryPool:
        if options.kind == "sliced":
            return SlicedPool(
                self._source, options.page_size, options.max_slice_size, options.max_pages, options.near_full
            )
        return ExclusivePool(self._source, options.max_slice_size, options.max_pages)

    # ------------------------------------------------------------------ reservations
    def reserve(self, size: int, stream: int = -1) -> SliceToken:
        """A token for ``size`` bytes (a validated non-negative int), last used by ``stream``;
        BufferTooBig or OutOfMemoryError."""
        self.until_check -= 1
        if self.until_check <= 0:
            self.until_check = self._check_period
            self._checks += 1
            for pool in self._pools:
                pool.cleanup(False)
        if not self._persistent_mode and not self._persistent.count:
            route = self._routes.get(size)
            if route is not None:
                first = route[0]
                lent = first.try_reserve(size)
                if lent is not None:
                    lent.stream = stream
                    if type(first) is SlicedPool and size not in self.reuse:
                        self.reuse[size] = first.reuse_entry(size)
                    return lent
        try:
            token = self._reserve_once(size)
        except OutOfMemoryError as error:
            token = self._retry_after_oom(size, error)
        token.stream = stream
        return token

    @property
    def reservations(self) -> int:
        """Reservations made so far."""
        return self._checks * self._check_period + self._check_period - self.until_check

    def _reserve_once(self, size: int) -> SliceToken:
        if self._persistent_mode:
            if size > self.max_page_size:
                raise BufferTooBig(size, self.max_page_size)
            persistent = self._persistent
            return persistent.try_reserve(size) or persistent.alloc(size)
        if self._persistent.count:
            token = self._persistent.try_reserve(size)
            if token is not None:
                return token
        route = self._routes.get(size)
        if route is None:
            route = self._route(size)
        token = route[0].try_reserve(size)
        if token is not None:
            return token
        release = self._release_queued
        if release is not None and release(False):
            # Queued work held freed memory (see ``release_queued`` in the class docstring): some of
            # it may be free now, and reusing it beats growing a pool.
            token = route[0].try_reserve(size)
            if token is not None:
                return token
        return self._alloc(size, route)

    def _route(self, size: int) -> tuple[MemoryPool, ...]:
        """The pools that accept ``size``, in ladder order; BufferTooBig when none does."""
        pairs = zip(self.pool_options, self._pools, strict=True)
        route = tuple(pool for opts, pool in pairs if opts.accepts(size))
        if not route:
            raise BufferTooBig(size, self.max_page_size)
        if len(self._routes) >= _ROUTE_CACHE:
            self._routes.clear()
            self.reuse.clear()
        self._routes[size] = route
        return route

    def _alloc(self, size: int, route: tuple[MemoryPool, ...]) -> SliceToken:
        """New memory from the first pool of ``route`` that can get it; full or out-of-room pools spill."""
        # A failure is kept without its traceback: the traceback would hold this frame, and with it
        # the token a later pool returns, alive in a reference cycle until the next gc pass.
        error: OutOfMemoryError | None = None
        failed_page: int | None = None
        for i, pool in enumerate(route):
            if i:
                token = pool.try_reserve(size)
                if token is not None:
                    return token
            page_size = pool.page_size if isinstance(pool, SlicedPool) else None
            if failed_page is not None and page_size is not None and page_size >= failed_page:
                continue  # a page at least as large as one that did not fit will not fit either
            try:
                new = pool.alloc(size)
            except OutOfMemoryError as e:
                error = e.with_traceback(None)
                if page_size is not None:
                    failed_page = page_size if failed_page is None else min(failed_page, page_size)
                continue
            if new is not None:
                return new
        if error is None:
            error = _PoolsFull(
                size,
                in_use=0,
                reserved=self._source.reserved,
                limit=None,
                detail="every pool that takes this size is capped (max_pages) and full",
            )
        try:
            raise error
        finally:
            error = None

    def _retry_after_oom(self, size: int, error: OutOfMemoryError) -> SliceToken:
        """Collect garbage, clean up, flush the storage and retry once; then raise with figures."""
        log.debug("out of memory for %d B (%s); cleaning up and retrying", size, error)
        gc.collect()
        if self._release_queued is not None:
            self._release_queued(True)
        self.cleanup(explicit=True)
        if self._reclaim is not None:
            self._reclaim()
        self.storage.flush()
        try:
            return self._reserve_once(size)
        except OutOfMemoryError as again:
            usage = self.usage()
            if self._on_oom is not None:
                try:
                    self._on_oom(size, usage.bytes_in_use, usage.bytes_reserved)
                except Exception:
                    log.exception("the on_oom callback failed")
            try:
                info = self.storage.memory_info()
            except Exception:
                info = None
            if isinstance(again, _PoolsFull):
                detail = "every pool that takes this size is capped (max_pages) and full"
            elif again.limit is not None and self.limit is not None:
                detail = f"the memory limit is reached ({self.limit.used} of {self.limit.bytes} B in pages)"
            else:
                detail = f"the device refused a page of {again.requested} B"
            raise OutOfMemoryError(
                size,
                in_use=usage.bytes_in_use,
                reserved=usage.bytes_reserved,
                limit=None if self.limit is None else self.limit.bytes,
                device_free=None if info is None else info[0],
                device_total=None if info is None else info[1],
                detail=detail,
            ) from again

    # ------------------------------------------------------------------ modes
    @property
    def mode(self) -> AllocationMode:
        """The allocation mode reservations use now (after the persistent policy)."""
        return AllocationMode.PERSISTENT if self._persistent_mode else AllocationMode.AUTO

    def push_mode(self, mode: AllocationMode) -> None:
        """Open an allocation-mode window; windows nest and the innermost wins."""
        if not isinstance(mode, AllocationMode):
            raise ValidationError(f"an allocation mode is an AllocationMode, got {mode!r}")
        self._modes.append(mode)
        self._update_mode()

    def pop_mode(self) -> None:
        """Close the innermost allocation-mode window."""
        if not self._modes:
            raise ValidationError("pop_mode() without an open allocation-mode window")
        self._modes.pop()
        self._update_mode()

    @contextlib.contextmanager
    def persistent(self) -> Iterator[None]:
        """A window in which reservations are persistent (unless the policy is 'disabled')."""
        self.push_mode(AllocationMode.PERSISTENT)
        try:
            yield
        finally:
            self.pop_mode()

    def _update_mode(self) -> None:
        if self._policy == "enforced":
            self._persistent_mode = True
        elif self._policy == "disabled":
            self._persistent_mode = False
        else:
            self._persistent_mode = bool(self._modes) and self._modes[-1] is AllocationMode.PERSISTENT
        if self._persistent_mode:
            self.reuse.clear()

    # ------------------------------------------------------------------ cleanup and figures
    def cleanup(self, explicit: bool) -> int:
        """Explicit: free every page no token holds (in every pool). Otherwise one idle check. Bytes freed."""
        freed = 0
        for pool in self._pools:
            freed += pool.cleanup(explicit)
        freed += self._persistent.cleanup(explicit)
        return freed

    def usage(self) -> MemoryUsage:
        """Live slices, bytes they requested, padding, and bytes of pages held (over every pool)."""
        usage = self._persistent.usage()
        for pool in self._pools:
            usage = usage + pool.usage()
        return usage

    def report(self) -> list[PoolReport]:
        """One report per pool: the ladder in routing order, then the persistent pool."""
        return [pool.report() for pool in self._pools] + [self._persistent.report()]

    def __repr__(self) -> str:
        return f"<MemoryManagement {len(self._pools)} pools, {self.usage()}>"
