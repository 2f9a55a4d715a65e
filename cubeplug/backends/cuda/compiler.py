"""The ``cuda`` and ``c`` dialects compiled with NVRTC through ``cupy.RawModule`` (docs/kernels.md).

A ``c`` source gets the shared prelude of :mod:`cubeplug.core.cdialect` and the kernel's defines;
a ``cuda`` source is native CUDA C++ and gets only the defines. CuPy compiles for the architecture of
the current device, caches the binary on disk (``~/.cupy/kernel_cache``) and the module in memory;
the server's CompileCache keeps one :class:`CudaProgram` per KernelId on top. Failures raise
CompileError with NVRTC's log, the numbered source as NVRTC saw it and the line of the first error.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

from cubeplug.backends.cuda.device import on_device
from cubeplug.backends.cuda.launch import (
    ArgLayout,
    CupyLauncher,
    DriverLauncher,
    arg_layout,
    driver_available,
)
from cubeplug.plugin import CompileError, ConfigError, ExecutionMode, Kernel, cdialect

DIALECTS = ("cuda", "c")
#: Options handed to NVRTC on top of CuPy's (C++17, its include paths, -arch for the device).
NVRTC_OPTIONS: tuple[str, ...] = ("-DCUBEPLUG_CUDA=1",)
_ERROR_LINE = re.compile(r"\((\d+)\): (?:catastrophic )?error:\s*(.*)")


@dataclass(frozen=True, eq=False)
class CudaProgram:
    """A compiled kernel: its launcher, the CuPy objects that keep the module loaded, its layout."""

    name: str
    entry: str
    source: str
    options: tuple[str, ...]
    launch: Any
    function: Any
    module: Any
    layout: ArgLayout
    block: tuple[int, int, int]

    @property
    def launch_path(self) -> str:
        """ "driver" or "cupy"."""
        return str(self.launch.path)


def source_for(kernel: Kernel, dialect: str) -> str:
    """The full source NVRTC compiles for ``kernel`` in ``dialect``."""
    src = kernel.sources[dialect]
    if not isinstance(src, str):
        raise CompileError(
            f"a {dialect!r} source must be text, got {type(src).__name__}", backend="cuda", kernel=kernel.name
        )
    if dialect == "c":
        return cdialect.full_source(kernel, src, "cuda", fp16=True)
    return cdialect.defines_block(kernel.defines, kernel.cube_dim) + src


def first_error(log: str) -> tuple[int | None, str]:
    """(line, message) of the first error in an NVRTC log; line None when the log names none."""
    for line in log.splitlines():
        m = _ERROR_LINE.search(line)
        if m:
            return int(m.group(1)), m.group(2).strip()
    for line in log.splitlines():
        if line.strip():
            return None, line.strip()
    return None, "NVRTC reported an error with an empty log"


def compile_cuda(
    kernel: Kernel,
    dialect: str,
    mode: ExecutionMode,
    *,
    device: int = 0,
    launch: str = "auto",
    disk_cache: bool = True,
) -> CudaProgram:
    """Compile ``kernel`` for ``device`` and build its launcher ("auto", "driver" or "cupy").

    ``disk_cache=False`` (``[compilation] cache = false``) keeps CuPy from reading or writing its
    on-disk kernel cache for this compilation.
    """
    import cupy

    source = source_for(kernel, dialect)
    entry = kernel.entry_point
    options = NVRTC_OPTIONS
    with on_device(device), _cupy_disk_cache(disk_cache):
        module = cupy.RawModule(code=source, options=options)
        try:
            raw = module.get_function(entry)
        except Exception as e:
            raise compile_error(e, kernel, source, options) from e
        function = raw.kernel
    layout = arg_layout(kernel)
    launcher = make_launcher(function, kernel.cube_dim, layout, launch)
    return CudaProgram(
        kernel.name, entry, source, options, launcher, function, module, layout, kernel.cube_dim
    )


def compile_error(error: Exception, kernel: Kernel, source: str, options: tuple[str, ...]) -> CompileError:
    """The CompileError for a failed NVRTC compilation or a missing entry point: NVRTC's log with
    the line of its first error, or what to declare."""
    from cupy.cuda.compiler import CompileException

    where: dict[str, Any] = {"backend": "cuda", "kernel": kernel.name, "source": source, "options": options}
    if isinstance(error, CompileException):
        log = error.get_message()
        line, message = first_error(log)
        return CompileError(message, log=log, line=line, col=None, **where)
    if "NOT_FOUND" in str(error):
        entry = kernel.entry_point
        return CompileError(
            f"the source has no kernel named {entry!r}; declare it as KERNEL {entry}(...) in the c "
            f'dialect or extern "C" __global__ void {entry}(...) in cuda, or pass entry=',
            log=str(error),
            **where,
        )
    return CompileError(f"{type(error).__name__}: {error}", log=str(error), **where)


@contextmanager
def _cupy_disk_cache(enabled: bool) -> Iterator[None]:
    """CuPy reads CUPY_CACHE_IN_MEMORY at each compilation: set it for this one when the cache is off."""
    if enabled:
        yield
        return
    previous = os.environ.get("CUPY_CACHE_IN_MEMORY")
    os.environ["CUPY_CACHE_IN_MEMORY"] = "1"
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("CUPY_CACHE_IN_MEMORY", None)
        else:
            os.environ["CUPY_CACHE_IN_MEMORY"] = previous


def make_launcher(function: Any, block: tuple[int, int, int], layout: ArgLayout, launch: str) -> Any:
    """The launcher for a loaded function on the requested path."""
    if launch == "cupy" or (launch == "auto" and not driver_available()):
        return CupyLauncher(function, block, layout)
    try:
        return DriverLauncher(int(function.ptr), block, layout)
    except ImportError as e:
        if launch == "driver":
            raise ConfigError(
                "[backends.cuda] launch = 'driver' needs cupy.cuda.driver.launchKernel or cuda-python "
                "(cuda.bindings); neither imports",
                key="launch",
                allowed="auto, cupy",
            ) from e
        return CupyLauncher(function, block, layout)
