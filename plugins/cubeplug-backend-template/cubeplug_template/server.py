"""The server: one device's executor. The core's ComputeServer does memory management, handle and
launch validation, tensors and profiling; a backend implements the primitives below.

Every primitive receives validated handles. ``handle.memory().storage`` is the slice's region of a
page; ``region.region(handle.start, handle.size)`` narrows it to the bytes the handle views, and
``storage.get`` turns that into the backend's resource (here a numpy view).
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import Future
from typing import Any

import numpy as np

from cubeplug.plugin import (
    Compiled,
    ComputeServer,
    CubeCount,
    DeviceInfo,
    ExecutionMode,
    Handle,
    Kernel,
    device_setup,
)
from cubeplug_template import NAME
from cubeplug_template.compiler import LaunchInfo, Program, compile_kernel
from cubeplug_template.queue import ImmediateQueue
from cubeplug_template.storage import HostStorage, memory_properties

DTYPES = frozenset({"f16", "f32", "f64", "i8", "i16", "i32", "i64", "u8", "u16", "u32", "u64", "bool"})


class TemplateServer(ComputeServer):
    """Runs ``python`` kernels on host memory, each operation at once and in order."""

    dialects = ("python",)
    per_stream_memory = False

    def __init__(self, storage: HostStorage, config: Any = None, device: int = 0) -> None:
        # device_setup derives the fp16/fp64/int64 flags from the dtypes and the largest allocation
        # from the page size; name what else the device can do (the conformance suite reads it).
        setup = device_setup(
            DeviceInfo(NAME, device, "host memory", vendor="template", driver=f"numpy {np.__version__}"),
            memory_properties(),
            dtypes=DTYPES,
            atomics=True,
            dynamic_count=True,
            offset_alignment=1,
            # Bytes of cl.shared a cube may use (a device's local/workgroup memory; host memory
            # has no limit: CUDA's static 48 KiB, as the cpu backend, keeps kernels portable).
            max_shared_bytes=48 * 1024,
        )
        super().__init__(backend=NAME, storage=storage, config=config, **setup.server_args())
        self.queue = ImmediateQueue()

    def _view(self, handle: Handle) -> np.ndarray:
        region = handle.memory().storage.region(handle.start, handle.size)
        view: np.ndarray = self.storage.get(region)
        return view

    # ------------------------------------------------------------------ primitives
    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> Program:
        """Compile a ``python``-dialect source."""
        return compile_kernel(kernel, dialect)

    def execute(
        self,
        stream_id: int,
        compiled: Compiled,
        count: CubeCount,
        buffers: Sequence[Handle],
        scalars: Sequence[Any],
    ) -> None:
        """Run the kernel now over views of the buffers (scalars as numpy scalars of their dtypes)."""
        values = compiled.kernel.numpy_scalars(scalars)
        self.queue.run(self._run_kernel, compiled.program, count, list(buffers), values)

    def _run_kernel(
        self, program: Program, count: CubeCount, buffers: list[Handle], scalars: list[Any]
    ) -> None:
        if count.handle is not None:  # CubeCount.dynamic: three u32 in device memory
            dims = tuple(int(v) for v in self._view(count.handle)[:12].view(np.uint32))
            if 0 in dims:
                return
        else:
            dims = (count.x, count.y, count.z)
        nb = ns = 0
        args: list[Any] = []
        for is_buffer, dtype, vector in program.layout:
            if is_buffer:
                view = self._view(buffers[nb]).view(dtype)
                args.append(view.reshape(-1, vector) if vector > 1 else view)
                nb += 1
            else:
                args.append(scalars[ns])
                ns += 1
        program.fn(LaunchInfo(dims, program.cube_dim), *args)  # type: ignore[arg-type]

    def write(self, stream_id: int, handle: Handle, data: memoryview) -> None:
        """Copy host bytes into the handle's region."""
        self.queue.run(self._write, handle, np.frombuffer(data, dtype=np.uint8))

    def _write(self, handle: Handle, data: np.ndarray) -> None:
        self._view(handle)[:] = data

    def read(self, stream_id: int, handles: list[Handle]) -> Future[list[bytes]]:
        """The bytes of each handle; every earlier operation has already run."""
        future: Future[list[bytes]] = Future()
        try:
            future.set_result([bytes(self._view(h)) for h in handles])
        except Exception as e:
            future.set_exception(e)
        return future

    def copy(self, stream_id: int, src: Handle, dst: Handle) -> None:
        """Copy ``src`` into ``dst``."""
        self.queue.run(self._copy, src, dst)

    def _copy(self, src: Handle, dst: Handle) -> None:
        self._view(dst)[:] = self._view(src)

    def flush(self, stream_id: int) -> None:
        """Nothing is queued; raise the first error of an earlier operation."""
        self.raise_async_error(self.queue.errors)

    def sync(self, stream_id: int) -> None:
        """Nothing is in flight; raise the first error of an earlier operation."""
        self.raise_async_error(self.queue.errors)

    def sync_all(self) -> None:
        """Nothing is in flight; raise the first error of an earlier operation."""
        self.raise_async_error(self.queue.errors)
