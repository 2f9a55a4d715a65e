"""Bind groups: the page regions a launch binds, the pipeline that binds them, cached per binding set.

A launch binds each buffer param to a region ``(page buffer, offset, size)`` of the memory pools'
pages, and the kernel's scalars to the queue's arena. Its bind group is made once per binding set
and cached under the program's ``bindings_id`` and the regions (``(page id, offset, size)`` per
buffer), :data:`BIND_GROUP_CACHE` of them at most; a page being released drops the ones that bind
it (:meth:`BindGroups.forget_page`).

**Read-only bindings.** A kernel with ``read`` params has a second pipeline that declares them
``var<storage, read>`` (``compiler.py`` says why). WebGPU refuses a dispatch that binds one
GPUBuffer both read-only and writable, and the pools cut many reservations from one page, so the
read-only pipeline is used only where no page a read buffer lies in is also bound to a written
param (:func:`read_only_allowed`); the cache entry says which of the two a bind group was made for.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cubeplug.backends.webgpu.compiler import BindLayout, WgslCompiler, WgslProgram
from cubeplug.backends.webgpu.health import DeviceHealth
from cubeplug.plugin import ValidationError

#: Bind groups kept per server before the oldest are dropped.
BIND_GROUP_CACHE = 4096

#: A bound region: (page buffer, byte offset, byte size).
Region = tuple[Any, int, int]


def up4(n: int) -> int:
    """``n`` rounded up to a multiple of 4 (a binding's size must be one)."""
    return n + (-n) % 4


def read_only_allowed(reads: Sequence[bool], buffers: Sequence[Any]) -> bool:
    """Whether the buffers ``reads`` marks can be bound read-only: WebGPU refuses a dispatch that
    binds one GPUBuffer both read-only and writable, so none of them may be a buffer (a page of the
    pools) that an unmarked, written binding binds too."""
    written = {id(b) for r, b in zip(reads, buffers) if not r}
    return not any(r and id(b) in written for r, b in zip(reads, buffers))


class BindGroups:
    """The bind groups of one device's launches and the pipeline each was made for."""

    def __init__(self, device: Any, compiler: WgslCompiler, health: DeviceHealth, arena: Any) -> None:
        self.device = device
        self.compiler = compiler
        self.health = health
        #: The queue's scalar arena, bound after the buffers of a kernel with scalars.
        self.arena = arena
        #: (bindings id, page, offset, size per buffer) -> (bind group, whether it binds read-only).
        #: The server's launch path reads it directly (a dict lookup a launch).
        self.cache: dict[tuple[int, ...], tuple[Any, bool]] = {}

    def make(self, program: WgslProgram, layout: BindLayout, regions: Sequence[Region]) -> Any:
        """A new bind group of ``layout``: the ``regions`` and the scalar arena; ValidationError
        where wgpu refuses them, DeviceLostError on a lost device."""
        import wgpu

        entries: list[dict[str, Any]] = [
            {"binding": i, "resource": {"buffer": buffer, "offset": offset, "size": up4(size)}}
            for i, (buffer, offset, size) in enumerate(regions)
        ]
        if program.scalars is not None:
            entries.append(
                {
                    "binding": len(regions),
                    "resource": {"buffer": self.arena, "offset": 0, "size": program.scalars.binding_size},
                }
            )
        try:
            return self.device.create_bind_group(layout=layout.bind_group_layout, entries=entries)
        except wgpu.GPUError as e:
            self.health.raise_lost(e)
            raise ValidationError(f"the buffers cannot be bound as given: {str(e).strip()}") from e

    @staticmethod
    def may_bind_read_only(program: WgslProgram, regions: Sequence[Region]) -> bool:
        """Whether ``regions`` can bind the program's read buffers read-only."""
        return program.read_only_source is not None and read_only_allowed(
            program.reads, [region[0] for region in regions]
        )

    def read_only(self, program: WgslProgram) -> tuple[Any, BindLayout]:
        """The program's read-only pipeline and layout (built at the first call); where the device
        failed to build it (and was not lost), its ``read_write`` ones, as the compiler then keeps."""
        import wgpu

        try:
            return self.compiler.read_only(program)
        except wgpu.GPUError as e:
            self.health.raise_lost(e)
            return program.pipeline, program.layout

    def entry(
        self, program: WgslProgram, key: tuple[int, ...], regions: Sequence[Region]
    ) -> tuple[Any, bool]:
        """The bind group binding ``regions`` and whether it binds the read buffers read-only, made
        (with the read-only pipeline where it can be) and cached under ``key``."""
        pipeline, layout = program.pipeline, program.layout
        if self.may_bind_read_only(program, regions):
            pipeline, layout = self.read_only(program)
        made = (self.make(program, layout, regions), pipeline is not program.pipeline)
        cache = self.cache
        if len(cache) >= BIND_GROUP_CACHE:
            del cache[next(iter(cache))]
        cache[key] = made
        return made

    def forget_page(self, page: int) -> None:
        """Drop the cached bind groups that bind a page being released."""
        cache = self.cache
        for key in [k for k in cache if page in k[1::3]]:
            del cache[key]

    def clear(self) -> None:
        """Drop every cached bind group."""
        self.cache.clear()
