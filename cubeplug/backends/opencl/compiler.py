"""Kernel compilation for OpenCL: the ``opencl`` (native) and ``c`` (portable) dialects.

``c`` sources get the OpenCL prelude of :mod:`cubeplug.core.cdialect` and the kernel's defines;
``opencl`` sources get the defines only. Built programs are cached per device in memory (shared by
every client of the device) and on disk: by the driver's own source cache where it has one (PoCL,
NVIDIA), else by PyOpenCL's binary cache. ``[compilation] cache = false`` turns off the memory cache
and PyOpenCL's; a driver's own cache is the driver's (e.g. ``POCL_KERNEL_CACHE=0``).
A failed build raises :class:`CompileError` with the build log, the options and the numbered source.
After the build the kernel's signature is checked against the declared params (count, address
space, element type where the type is a known OpenCL type), with ``-cl-kernel-arg-info``.
"""

from __future__ import annotations

import re
import struct
import threading
import time
from dataclasses import dataclass, field, replace
from typing import Any

from cubeplug.backends.opencl.devices import DeviceContext
from cubeplug.plugin import Buffer, CompileError, ExecutionMode, Kernel, cdialect

#: Dialects in order of preference: native source first.
DIALECTS = ("opencl", "c")
#: Build options of every program with parameters (for the signature check).
BUILD_OPTIONS = ("-cl-kernel-arg-info",)


def build_options(kernel: Kernel) -> tuple[str, ...]:
    """The build options for ``kernel``: NVIDIA's OpenCL fails (ptxas parse error) on
    ``-cl-kernel-arg-info`` for a kernel without parameters, and there is nothing to check then."""
    return BUILD_OPTIONS if kernel.params else ()

#: OpenCL type names (as kernel arg info reports them) that match each dtype.
_TYPE_NAMES: dict[str, tuple[str, ...]] = {
    "f16": ("half", "f16"),
    "f32": ("float", "f32"),
    "f64": ("double", "f64"),
    "i8": ("char", "i8"),
    "i16": ("short", "i16"),
    "i32": ("int", "i32"),
    "i64": ("long", "i64"),
    "u8": ("uchar", "u8"),
    "u16": ("ushort", "u16"),
    "u32": ("uint", "u32"),
    "u64": ("ulong", "u64"),
    "bool": ("uchar", "char", "bool", "u8", "i8"),
}
_KNOWN_TYPES = frozenset(
    n + w for names in _TYPE_NAMES.values() for n in names for w in ("", "2", "3", "4", "8", "16")
)
#: Words of a reported type name that are not part of the type, and spellings to normalise.
_QUALIFIERS = frozenset({"const", "volatile", "restrict", "__restrict", "__global", "global"})
_CANONICAL = {
    "unsigned int": "uint", "unsigned char": "uchar", "unsigned short": "ushort", "unsigned long": "ulong",
    "signed char": "char", "short int": "short", "long int": "long", "unsigned long int": "ulong",
}


def base_type(type_name: str) -> str:
    """The element type of a reported kernel argument type: ``"const unsigned int*"`` -> ``"uint"``."""
    words = [w for w in type_name.replace("*", " ").split() if w not in _QUALIFIERS]
    name = " ".join(words)
    return _CANONICAL.get(name, name)
#: ``file:line:col: message`` in a build log line
#: (PoCL: ``error: f.cl:3:5: msg``, NVIDIA: ``<kernel>:3:5: error: msg``).
_LOG_LOCATION = re.compile(r":(\d+):(\d+):\s*(.*)")
_ERROR_PREFIX = re.compile(r"^(?:fatal\s+)?error:\s*")


#: What :attr:`OpenCLProgram.last_scalars` holds for a value not set (equal to nothing else).
UNSET = object()


@dataclass
class OpenCLProgram:
    """A built kernel ready to launch: the ``cl.Kernel``, its arg slots and what was bound last."""

    kernel: Any
    name: str
    #: The cube dim as the OpenCL local size (always 3-D).
    local: tuple[int, int, int]
    #: Kernel argument index of each buffer param, in declared order (and of each scalar param).
    buffer_slots: tuple[int, ...]
    scalar_slots: tuple[int, ...]
    #: The most work-items per group the driver allows for this kernel.
    max_group_size: int
    source: str
    options: tuple[str, ...]
    #: Buffers bound by the previous launch (arguments stay set on a kernel between enqueues).
    last_buffers: list[Any] = field(default_factory=list)
    #: ``[slot, code, value, ...]`` for the scalars: values are filled in on each launch.
    scalar_args: list[Any] = field(default_factory=list)
    #: The scalar values set on the kernel now, one per scalar param (:data:`UNSET`: set them on the
    #: next launch).
    last_scalars: list[Any] = field(default_factory=list)
    build_seconds: float = 0.0
    #: ``set_buffers((slot, buffer, ...))`` and ``set_scalars((slot, code, value, ...))``: PyOpenCL's
    #: multi-argument setters where it has them (much cheaper than ``set_arg``), else a loop.
    set_buffers: Any = None
    set_scalars: Any = None

    def forget_bindings(self) -> None:
        """Forget the arguments set last (they are all set again on the next launch)."""
        self.last_buffers[:] = [None] * len(self.last_buffers)
        self.last_scalars[:] = [UNSET] * len(self.last_scalars)


# Built programs by (device, source, options): shared by every client of a device.
_programs: dict[tuple[int, str, tuple[str, ...]], Any] = {}
_programs_lock = threading.Lock()


def source_for(ctx: DeviceContext, kernel: Kernel, dialect: str) -> str:
    """The full source handed to the OpenCL compiler for ``kernel`` in ``dialect``."""
    src = kernel.sources[dialect]
    if not isinstance(src, str):
        raise CompileError(
            f"{dialect} sources are source text, got {type(src).__name__}",
            backend="opencl", kernel=kernel.name,
        )
    if dialect == "c":
        return cdialect.full_source(
            kernel, src, "opencl", fp16=bool(ctx.limits["fp16"]), fp64=bool(ctx.limits["fp64"])
        )
    return cdialect.defines_block(kernel.defines, kernel.cube_dim) + src


def header_lines(ctx: DeviceContext, kernel: Kernel, dialect: str) -> int:
    """How many lines the backend put before the user's source."""
    if dialect == "c":
        return cdialect.prelude_lines(
            "opencl", kernel, fp16=bool(ctx.limits["fp16"]), fp64=bool(ctx.limits["fp64"])
        )
    return cdialect.defines_block(kernel.defines, kernel.cube_dim).count("\n")


def build_program(ctx: DeviceContext, kernel: Kernel, dialect: str, source: str, cache: bool) -> Any:
    """The built program for ``source`` on this device, from the memory or disk cache when it is there."""
    key = (int(ctx.device.int_ptr), source, build_options(kernel))
    program = _programs.get(key) if cache else None
    if program is not None:
        return program
    with _programs_lock:
        program = _programs.get(key) if cache else None
        if program is None:
            program = _build(ctx, kernel, dialect, source, cache)
            if cache:
                _programs[key] = program
    return program


def _build(ctx: DeviceContext, kernel: Kernel, dialect: str, source: str, cache: bool) -> Any:
    """Build from source; through PyOpenCL's binary cache only where the driver keeps no cache itself.

    Drivers with their own source cache (PoCL, NVIDIA) build from source every time, which keeps the
    kernel argument info available for the signature check (programs loaded from binaries may lack it).
    """
    import pyopencl as cl
    from pyopencl.cache import create_built_program_from_source_cached
    from pyopencl.characterize import has_src_build_cache

    options = " ".join(build_options(kernel)).encode()
    if cache and not has_src_build_cache(ctx.device):
        try:
            program, _ = create_built_program_from_source_cached(
                ctx.context, source, options, [ctx.device], cache_dir=None
            )
            return program
        except cl.Error as e:
            if e.code != cl.status_code.BUILD_PROGRAM_FAILURE:
                raise CompileError(
                    f"{e.routine}: {e}", backend="opencl", kernel=kernel.name, source=source,
                    options=build_options(kernel),
                ) from e
        # Build once more, uncached, to read the log from the program object.
    program = cl._cl._Program(ctx.context, source)
    try:
        program.build(options, [ctx.device])
    except cl.Error as e:
        failed = e.code == cl.status_code.BUILD_PROGRAM_FAILURE
        log = str(program.get_build_info(ctx.device, cl.program_build_info.LOG)) if failed else ""
        # Release the failed program now. The error's traceback holds PyOpenCL's build frame, which
        # holds the program and the error (a reference cycle), and this frame: dropped, the program
        # goes with its last reference here, not later inside the cyclic garbage collector.
        e.__traceback__ = None
        del program
        if not failed:
            raise CompileError(
                f"{e.routine}: {e}", backend="opencl", kernel=kernel.name, source=source,
                options=build_options(kernel),
            ) from e
        raise _compile_error(ctx, kernel, dialect, source, log or str(e)) from e
    return program


def _compile_error(ctx: DeviceContext, kernel: Kernel, dialect: str, source: str, log: str) -> CompileError:
    """A CompileError whose line points into the user's source (the header lines subtracted)."""
    first_error = next((ln.strip() for ln in log.splitlines() if "error" in ln.lower()), "")
    match = _LOG_LOCATION.search(first_error)
    line = col = None
    message = first_error or "the OpenCL compiler rejected the source"
    if match is not None:
        message = _ERROR_PREFIX.sub("", match.group(3)) or message
        skip = header_lines(ctx, kernel, dialect)
        full_line = int(match.group(1))
        col = int(match.group(2))
        line = full_line - skip if full_line > skip else full_line
        message += f" (line {full_line} of the full source below, after {skip} lines of prelude and defines)"
    return CompileError(
        message,
        backend="opencl",
        kernel=kernel.name,
        source=source,
        log=log,
        options=build_options(kernel),
        line=line,
        col=col,
    )


def compile_kernel(
    ctx: DeviceContext, kernel: Kernel, dialect: str, mode: ExecutionMode, cache: bool = True
) -> OpenCLProgram:
    """Build ``kernel`` and wrap its ``cl.Kernel`` for launching; CompileError on any mismatch."""
    import pyopencl as cl

    source = source_for(ctx, kernel, dialect)
    start = time.perf_counter()
    program = build_program(ctx, kernel, dialect, source, cache)
    entry = kernel.entry_point
    try:
        clk = cl.Kernel(program, entry)
    except cl.Error as e:
        names = str(program.get_info(cl.program_info.KERNEL_NAMES)).replace(";", ", ") or "none"
        raise CompileError(
            f"the source has no kernel named {entry!r} (it has: {names}); name the kernel like the "
            f"Kernel or pass entry=",
            backend="opencl", kernel=kernel.name, source=source, options=BUILD_OPTIONS,
        ) from e
    _check_signature(clk, kernel, source)
    buffer_slots = tuple(i for i, p in enumerate(kernel.params) if isinstance(p, Buffer))
    scalar_slots = tuple(i for i, p in enumerate(kernel.params) if not isinstance(p, Buffer))
    try:
        max_group = int(clk.get_work_group_info(cl.kernel_work_group_info.WORK_GROUP_SIZE, ctx.device))
    except cl.Error:  # pragma: no cover - every driver answers this
        max_group = int(ctx.limits["max_work_group_size"])
    cube = kernel.cube_dim
    return OpenCLProgram(
        kernel=clk,
        name=entry,
        local=(cube[0], cube[1], cube[2]),
        buffer_slots=buffer_slots,
        scalar_slots=scalar_slots,
        max_group_size=max_group,
        source=source,
        options=build_options(kernel),
        last_buffers=[None] * len(buffer_slots),
        last_scalars=[UNSET] * len(scalar_slots),
        build_seconds=time.perf_counter() - start,
        set_buffers=getattr(clk, "_set_arg_multi", None) or _pairwise(clk.set_arg),
        **_scalar_setter(clk, kernel, scalar_slots),
    )


def clone_program(prog: OpenCLProgram, kernel: Kernel) -> OpenCLProgram:
    """``prog`` with a ``cl.Kernel`` of its own (nothing bound yet): kernel arguments belong to a
    kernel object, so a graph's replay binds its launches on clones and leaves ``prog`` as the
    launch path set it."""
    import pyopencl as cl

    clk = cl.Kernel(prog.kernel.program, prog.name)
    return replace(
        prog,
        kernel=clk,
        last_buffers=[None] * len(prog.buffer_slots),
        last_scalars=[UNSET] * len(prog.scalar_slots),
        set_buffers=getattr(clk, "_set_arg_multi", None) or _pairwise(clk.set_arg),
        **_scalar_setter(clk, kernel, prog.scalar_slots),
    )


#: PyOpenCL's packing codes (``Kernel._set_arg_buf_pack_multi``) of the dtypes it packs itself.
_PACK_CODES = {
    "f32": b"f", "f64": b"d", "i8": b"b", "u8": b"B", "i16": b"h", "u16": b"H", "i32": b"i", "u32": b"I",
}
if struct.calcsize("l") == 8:  # C long is 64-bit (not on Windows)
    _PACK_CODES.update({"i64": b"l", "u64": b"L"})
#: struct formats for the fallback that packs in Python (f16, bool as one byte, and 64-bit ints where
#: C long is 32-bit).
_STRUCT_CODES = {
    "f16": "<e", "f32": "<f", "f64": "<d", "i8": "<b", "u8": "<B", "i16": "<h", "u16": "<H",
    "i32": "<i", "u32": "<I", "i64": "<q", "u64": "<Q", "bool": "<?",
}


def _scalar_setter(clk: Any, kernel: Kernel, slots: tuple[int, ...]) -> dict[str, Any]:
    """``scalar_args`` (``[slot, code, value, ...]``) and the setter that takes it as a tuple.

    PyOpenCL's C++ multi-setter packs Python numbers and numpy scalars itself; a kernel with a dtype
    it cannot pack gets a Python fallback that packs every value with :mod:`struct`.
    """
    dtypes = [p.dtype for p in kernel.params if not isinstance(p, Buffer)]
    pack_multi = getattr(clk, "_set_arg_buf_pack_multi", None)
    if pack_multi is not None and all(d in _PACK_CODES for d in dtypes):
        args: list[Any] = [x for slot, d in zip(slots, dtypes) for x in (slot, _PACK_CODES[d], None)]
        return {"scalar_args": args, "set_scalars": pack_multi}
    set_buf = getattr(clk, "_set_arg_buf_multi", None) or _pairwise(clk.set_arg)
    args = [x for slot, d in zip(slots, dtypes) for x in (slot, struct.Struct(_STRUCT_CODES[d]), None)]

    def set_scalars(triples: tuple[Any, ...]) -> None:
        pairs: list[Any] = []
        for i in range(0, len(triples), 3):
            pairs += (triples[i], triples[i + 1].pack(triples[i + 2]))
        set_buf(tuple(pairs))

    return {"scalar_args": args, "set_scalars": set_scalars}


def _pairwise(set_arg: Any) -> Any:
    """A ``(slot, value, slot, value, ...)`` setter over ``kernel.set_arg`` (older PyOpenCL)."""

    def set_args(pairs: tuple[Any, ...]) -> None:
        for i in range(0, len(pairs), 2):
            set_arg(pairs[i], pairs[i + 1])

    return set_args


def _check_signature(clk: Any, kernel: Kernel, source: str) -> None:
    """The kernel's signature must match the declared params; CompileError naming the first mismatch."""
    import pyopencl as cl

    def fail(message: str) -> CompileError:
        return CompileError(
            message, backend="opencl", kernel=kernel.name, source=source, options=BUILD_OPTIONS
        )

    nargs = int(clk.num_args)
    if nargs != len(kernel.params):
        raise fail(
            f"the kernel's signature has {nargs} arguments but {len(kernel.params)} params are declared "
            f"({', '.join(p.name for p in kernel.params) or 'none'}); they must match one to one, in order"
        )
    info = cl.kernel_arg_info
    global_q = cl.kernel_arg_address_qualifier.GLOBAL
    for i, param in enumerate(kernel.params):
        try:
            address = clk.get_arg_info(i, info.ADDRESS_QUALIFIER)
            type_name = str(clk.get_arg_info(i, info.TYPE_NAME))
        except cl.Error:  # the driver keeps no arg info: nothing more to check
            return
        is_buffer = isinstance(param, Buffer)
        if is_buffer and (address != global_q or "*" not in type_name):
            raise fail(
                f"param {param.name!r} is a Buffer, but kernel argument {i} is {type_name!r}, not a "
                f"GLOBAL pointer; declare it as GLOBAL T*"
            )
        if not is_buffer and "*" in type_name:
            raise fail(
                f"param {param.name!r} is a Scalar, but kernel argument {i} is the pointer {type_name!r}"
            )
        base = base_type(type_name)
        vector = param.vector if isinstance(param, Buffer) else 1
        suffix = str(vector) if vector > 1 else ""
        allowed = {n + suffix for n in _TYPE_NAMES[param.dtype]}
        if base in _KNOWN_TYPES and base not in allowed:
            raise fail(
                f"param {param.name!r} is declared {param.dtype}"
                f"{f' x{vector}' if vector > 1 else ''} but kernel argument {i} is {type_name!r}; "
                f"use {' or '.join(sorted(allowed))}"
            )
