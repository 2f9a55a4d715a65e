"""Kernel launchers: CuPy's ``Function`` or the driver's ``cuLaunchKernel``, arguments built once.

Everything about a kernel's arguments that does not change between launches is computed when it is
compiled (:func:`arg_layout`): the order of buffers and scalars among the declared params and, for
the driver path, a :class:`struct.Struct` that packs one launch's values into a parameter block of
8-byte slots whose addresses are fixed. ``cuLaunchKernel`` copies the values at the call, so the
block is reused by the next launch. A launch then costs one pack and one driver call.
"""

from __future__ import annotations

import ctypes
import functools
import struct
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from cubeplug.plugin import DTYPES, Buffer, Kernel, ValidationError

#: struct codes of a scalar in an 8-byte slot (pointers are ``Q``), little-endian, standard sizes.
SLOT_CODES = {
    "f16": "e6x",
    "f32": "f4x",
    "f64": "d",
    "i8": "b7x",
    "i16": "h6x",
    "i32": "i4x",
    "i64": "q",
    "u8": "B7x",
    "u16": "H6x",
    "u32": "I4x",
    "u64": "Q",
    "bool": "?7x",
}


@dataclass(frozen=True, slots=True)
class ArgLayout:
    """Where each declared param comes from, and how the driver path packs them."""

    #: Per declared param, its index in ``(*buffer_pointers, *scalars)``; None when that is the order.
    order: tuple[int, ...] | None
    #: Packs the values, in declared order, into 8-byte slots.
    packer: struct.Struct
    nargs: int
    #: The numpy scalar type of each scalar param, in declared order (CuPy's path infers C types).
    scalar_types: tuple[type, ...] = ()


def arg_layout(kernel: Kernel) -> ArgLayout:
    """The argument layout of a kernel, computed once per compiled kernel."""
    nbuf = len(kernel.buffer_params)
    order: list[int] = []
    codes = ["<"]
    b = s = 0
    for p in kernel.params:
        if isinstance(p, Buffer):
            order.append(b)
            b += 1
            codes.append("Q")
        else:
            order.append(nbuf + s)
            s += 1
            codes.append(SLOT_CODES[p.dtype])
    ordered = tuple(order)
    identity = ordered == tuple(range(len(ordered)))
    types = tuple(DTYPES[p.dtype].type for p in kernel.params if not isinstance(p, Buffer))
    return ArgLayout(None if identity else ordered, struct.Struct("".join(codes)), len(ordered), types)


def arrange(layout: ArgLayout, pointers: list[Any], scalars: Sequence[Any]) -> list[Any]:
    """The launch values in declared order."""
    values = pointers + list(scalars) if scalars else pointers
    order = layout.order
    return values if order is None else [values[i] for i in order]


class CupyLauncher:
    """Launches through ``cupy.cuda.function.Function`` (the object behind ``RawKernel``)."""

    path = "cupy"

    def __init__(self, function: Any, block: tuple[int, int, int], layout: ArgLayout) -> None:
        from cupy.cuda import function as cf

        self._call = function.__call__
        self._block = block
        self._layout = layout
        # CIntptr passes a pointer by value with no dtype inference; numpy's uint64 is the fallback.
        self._wrap: Callable[[int], Any] = getattr(cf, "CIntptr", None) or _uint64()

    def __call__(
        self, stream: Any, grid: tuple[int, int, int], pointers: list[int], scalars: Sequence[Any]
    ) -> None:
        """Queue one launch on ``stream`` (an object with ``.ptr``)."""
        wrap = self._wrap
        layout = self._layout
        try:
            typed = [t(v) for t, v in zip(layout.scalar_types, scalars, strict=True)]
        except (OverflowError, ValueError, TypeError) as e:  # only unchecked launches get here
            raise ValidationError(f"kernel scalars {list(scalars)!r}: {e}") from e
        args = arrange(layout, [wrap(p) for p in pointers], typed)
        self._call(grid, self._block, args, 0, stream)


class DriverLauncher:
    """Launches with ``cuLaunchKernel`` on a parameter block packed in place (no per-argument objects).

    The call goes through CuPy's own Cython binding (``cupy.cuda.driver.launchKernel``: plain
    integers, GIL released) or, where a CuPy lacks it, through cuda-python's
    ``cuda.bindings.driver.cuLaunchKernel``. The block is shared by the launches of one compiled
    kernel: the server calls a launcher only under its client's lock.
    """

    path = "driver"

    def __init__(self, function_ptr: int, block: tuple[int, int, int], layout: ArgLayout) -> None:
        self._f = int(function_ptr)
        self._cupy_launch = cupy_launch_kernel()
        self._cuda_python: Any = None
        if self._cupy_launch is None:
            from cuda.bindings import driver

            self._cuda_python = driver
            self._function = driver.CUfunction(self._f)
            self._cu_streams: dict[int, Any] = {}
        self._block = block
        self._layout = layout
        self._order = layout.order
        n = max(1, layout.nargs)
        self._block_mem = ctypes.create_string_buffer(8 * n)
        self._pack_into = functools.partial(layout.packer.pack_into, self._block_mem, 0)
        base = ctypes.addressof(self._block_mem)
        self._slots = (ctypes.c_void_p * n)(*[base + 8 * i for i in range(n)])
        self._params = ctypes.addressof(self._slots) if layout.nargs else 0

    def inline_parts(self) -> dict[str, Any] | None:
        """What a launch plan needs to pack and launch inline (CuPy's binding only), else None.

        ``pack(*values)`` packs the declared-order values into the block; ``launch_kernel(function,
        gx, gy, gz, bx, by, bz, 0, stream_ptr, params, 0)`` is ``cuLaunchKernel``.
        """
        if self._cupy_launch is None:
            return None
        return {
            "pack": self._pack_into, "launch_kernel": self._cupy_launch,
            "function": self._f, "params": self._params,
        }

    @property
    def binding(self) -> str:
        """Which binding calls the driver: "cupy" or "cuda-python"."""
        return "cupy" if self._cupy_launch is not None else "cuda-python"

    def __call__(
        self, stream: Any, grid: tuple[int, int, int], pointers: list[int], scalars: Sequence[Any]
    ) -> None:
        """Pack the values into the parameter block and queue one launch on ``stream``."""
        try:
            if self._order is None:
                self._pack_into(*pointers, *scalars)
            else:
                self._pack_into(*arrange(self._layout, pointers, scalars))
        except (struct.error, OverflowError, TypeError) as e:  # only unchecked launches get here
            raise ValidationError(f"kernel arguments {[*pointers, *scalars]!r}: {e}") from e
        launch = self._cupy_launch
        bx, by, bz = self._block
        if launch is not None:  # raises CUDADriverError, which the server maps
            launch(self._f, grid[0], grid[1], grid[2], bx, by, bz, 0, stream.ptr, self._params, 0)
            return
        err = self._cuda_python.cuLaunchKernel(
            self._function, grid[0], grid[1], grid[2], bx, by, bz, 0, self._cu_stream(stream.ptr),
            self._params, 0,
        )[0]
        if err:
            # A plain error: the server maps it (and names the grid limits when they are the cause).
            message = driver_error(self._cuda_python, err)
            raise DriverLaunchError(f"cuLaunchKernel failed: {message}", int(err))

    def _cu_stream(self, ptr: int) -> Any:
        cu = self._cu_streams.get(ptr)
        if cu is None:
            cu = self._cu_streams[ptr] = self._cuda_python.CUstream(ptr)
        return cu


def cupy_launch_kernel() -> Callable[..., None] | None:
    """CuPy's ``cuLaunchKernel`` binding taking plain integers, or None where it is missing."""
    try:
        from cupy.cuda import driver
    except Exception:
        return None
    return getattr(driver, "launchKernel", None)


def driver_available() -> bool:
    """True when a packed-block ``cuLaunchKernel`` binding imports (CuPy's or cuda-python's)."""
    if cupy_launch_kernel() is not None:
        return True
    try:
        from cuda.bindings import driver  # noqa: F401
    except Exception:
        return False
    return True


class DriverLaunchError(RuntimeError):
    """cuLaunchKernel returned an error code (``status``)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


def driver_error(driver: Any, err: Any) -> str:
    """A driver error code as ``NAME: description``."""
    try:
        name = driver.cuGetErrorName(err)[1].decode()
        text = driver.cuGetErrorString(err)[1].decode()
        return f"{name}: {text}"
    except Exception:
        return f"CUresult {int(err)}"


def _uint64() -> Callable[[int], Any]:
    import numpy as np

    return np.uint64
