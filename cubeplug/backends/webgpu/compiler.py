"""The ``wgsl`` kernel dialect: generated declarations (docs/kernels.md), pipelines and error mapping.

The backend writes the declarations and the user's source provides the entry point with
``@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)``. Buffer ``i`` is
``@group(0) @binding(i)``, named as its param and typed ``array<T>`` (``array<vec4<T>>`` for vector
buffers, ``array<atomic<T>>`` for atomic ones); the scalars are one read-only storage struct bound
after the buffers as ``scalars``; ``defines`` and the cube dim are ``const``\\ s.

WebGPU forbids one buffer from being bound read-only and read-write in the same dispatch, and the
memory pools put many slices in one page buffer, so the pipeline every launch can use is built from
declarations that are all ``read_write``. A kernel with ``read`` params (not atomic) also gets, at
the first launch whose read buffers lie in no page that a written param binds, a second pipeline
that declares them ``var<storage, read>`` (:meth:`WgslCompiler.read_only`), chosen per bind
group (:mod:`~cubeplug.backends.webgpu.bindings`). Its source also validates the declared access
modes when the kernel is compiled, so writing a read buffer is a CompileError.

Why the second pipeline: it tells the driver the inputs are not written (the SPIR-V
``NonWritable`` decoration naga gives ``read`` bindings), and NVIDIA's Vulkan compiler schedules
some kernels better for it. On the H100, std.matmul's ``reg_8x16_vec_db16`` ran 42.2 TFLOP/s at
4096^3 f32 with ``read_write`` inputs and 45.0 with ``read`` ones; others ran slower
(``reg_8x8_vec_db16`` 37.3 -> 31.3; ``bench/results/matmul-vulkan-readonly-h100-2026-11-26.json``),
which std's autotuning measures as they are bound. A kernel that should not get it declares the
param ``read_write``.

A source whose first line is :data:`~cubeplug.core.wgsl.STRUCT_BUFFERS` gets each buffer as a
struct holding its array (``p.data[i]``); the kernel language writes its sources so
(:mod:`cubeplug.core.wgsl` says why).

A kernel compiled for unchecked launches is built without wgpu's runtime checks (index clamping,
loop bounds): see ``trusted.py``.
"""

from __future__ import annotations

import itertools
import numbers
import re
import struct
from dataclasses import dataclass
from typing import Any

from cubeplug.backends.webgpu.trusted import trusted_module
from cubeplug.plugin import Buffer, CompileError, ExecutionMode, Kernel, Scalar, wgsl

DIALECTS = ("wgsl",)

#: WGSL spelling, byte size and alignment of each scalar type cubeplug can bind.
WGSL_TYPES: dict[str, tuple[str, int, str]] = {
    "f16": ("f16", 2, "e"),
    "f32": ("f32", 4, "f"),
    "f64": ("f64", 8, "d"),
    "i32": ("i32", 4, "i"),
    "u32": ("u32", 4, "I"),
    "i64": ("i64", 8, "q"),
    "u64": ("u64", 8, "Q"),
}
#: The device feature each dtype needs beyond core WGSL.
DTYPE_FEATURES = {"f16": "shader-f16", "f64": "shader-f64", "i64": "shader-int64", "u64": "shader-int64"}


def wgsl_dtypes(features: frozenset[str] | set[str]) -> set[str]:
    """The dtypes WGSL kernels can use with the device's ``features``: f32, i32, u32, and those whose
    feature (:data:`DTYPE_FEATURES`: f16, f64, 64-bit ints) the device has."""
    return {"f32", "i32", "u32"} | {dtype for dtype, feature in DTYPE_FEATURES.items() if feature in features}


_LOCATION = re.compile(r"┌─ [^:\n]*:(\d+):(\d+)")
_CARET = re.compile(r"\^+\s*(\S.*)$")
_SCALAR_TYPE_NAMES = {"f16", "f32", "f64", "i32", "u32", "i64", "u64", "bool"}
_layout_ids = itertools.count(1)
_bindings_ids = itertools.count(1)


@dataclass(frozen=True, slots=True)
class ScalarLayout:
    """How the scalars of a kernel are packed: the struct's byte layout and its binding size."""

    packer: struct.Struct
    #: Bytes of the WGSL struct rounded up to 4 (a storage binding size must be a multiple of 4).
    binding_size: int


@dataclass(frozen=True, slots=True)
class BindLayout:
    """A bind-group layout shared by the kernels whose bindings have the same minimum sizes and
    read-only buffers."""

    id: int
    bind_group_layout: Any
    pipeline_layout: Any
    #: Each buffer binding's minimum size.
    buffer_sizes: tuple[int, ...]
    #: Bytes of the scalars binding (0: the kernel has no scalars).
    scalar_size: int
    #: Per buffer binding: whether it is ``read-only-storage`` (empty: none is).
    read_only: tuple[bool, ...] = ()

    @property
    def n_buffers(self) -> int:
        """How many buffers a bind group of this layout binds."""
        return len(self.buffer_sizes)


@dataclass(slots=True, eq=False)
class WgslProgram:
    """A compiled WGSL kernel: the pipeline, its bind layout, the scalar packing and the sources.

    Every field is set when the kernel is compiled, except :attr:`read_only_pipeline`, which
    :meth:`WgslCompiler.read_only` builds at the first launch that can use it.
    """

    pipeline: Any
    layout: BindLayout
    scalars: ScalarLayout | None
    source: str
    header_lines: int
    #: Per buffer param: whether it may be bound read-only (a ``read`` param, not atomic).
    reads: tuple[bool, ...] = ()
    #: The source with those params declared ``var<storage, read>`` (None: the kernel has none).
    read_only_source: str | None = None
    #: Whether the pipelines are built without wgpu's runtime checks (``trusted.py``).
    unchecked: bool = False
    label: str = ""
    entry_point: str = ""
    #: One id per (layout, reads): programs with the same one share bind groups (of either layout).
    bindings_id: int = 0
    #: ``(pipeline, layout)`` with the ``reads`` buffers bound read-only, once built.
    read_only_pipeline: tuple[Any, BindLayout] | None = None


def scalar_layout(kernel: Kernel) -> ScalarLayout | None:
    """The WGSL storage-struct layout of the kernel's scalars (None when it has none)."""
    if not kernel.scalar_params:
        return None
    fmt = "<"
    offset = 0
    max_align = 1
    for p in kernel.scalar_params:
        _, size, code = WGSL_TYPES[p.dtype]
        pad = (-offset) % size
        if pad:
            fmt += f"{pad}x"
        fmt += code
        offset += pad + size
        max_align = max(max_align, size)
    # The struct's size rounded up to its alignment, then to 4 (storage bindings are multiples of 4).
    end = offset + (-offset) % max_align
    end += (-end) % 4
    if end > offset:
        fmt += f"{end - offset}x"
    return ScalarLayout(struct.Struct(fmt), end)


def _round4(n: int) -> int:
    return n + (-n) % 4


def _const(name: str, value: Any) -> str:
    if isinstance(value, bool):
        return f"const {name}: bool = {'true' if value else 'false'};"
    if isinstance(value, numbers.Integral):
        return f"const {name} = {int(value)};"
    if isinstance(value, numbers.Real):
        return f"const {name} = {float(value)!r};"
    text = str(value)
    base = text.split("<", 1)[0]
    if base in _SCALAR_TYPE_NAMES or base in ("vec2", "vec3", "vec4", "mat2x2", "mat3x3", "mat4x4", "array"):
        return f"alias {name} = {text};"
    return f"const {name} = {text};"


def _element(param: Buffer) -> str:
    base = WGSL_TYPES[param.dtype][0]
    if param.atomic:
        return f"atomic<{base}>"
    if param.vector > 1:
        return f"vec{param.vector}<{base}>"
    return base


def generate_header(kernel: Kernel, enforce_access: bool, structs: bool = False) -> str:
    """The declarations prepended to the user's source (``read`` params read-only if
    ``enforce_access``; each buffer a struct holding its array if ``structs``)."""
    lines = []
    if "f16" in kernel.uses_dtypes:
        lines.append("enable f16;")
    x, y, z = kernel.cube_dim
    lines += [
        f"const CUBE_DIM_X: u32 = {x}u;",
        f"const CUBE_DIM_Y: u32 = {y}u;",
        f"const CUBE_DIM_Z: u32 = {z}u;",
    ]
    lines += [_const(name, value) for name, value in kernel.defines.items()]
    for i, p in enumerate(kernel.buffer_params):
        access = "read" if enforce_access and p.access == "read" and not p.atomic else "read_write"
        if structs:
            lines.append(f"struct CubeplugBuffer_{p.name} {{ {wgsl.BUFFER_MEMBER}: array<{_element(p)}> }}")
            lines.append(f"@group(0) @binding({i}) var<storage, {access}> {p.name}: CubeplugBuffer_{p.name};")
        else:
            lines.append(f"@group(0) @binding({i}) var<storage, {access}> {p.name}: array<{_element(p)}>;")
    if kernel.scalar_params:
        fields = ", ".join(f"{p.name}: {WGSL_TYPES[p.dtype][0]}" for p in kernel.scalar_params)
        lines.append(f"struct CubeplugScalars {{ {fields} }}")
        lines.append(
            f"@group(0) @binding({len(kernel.buffer_params)}) var<storage, read> scalars: CubeplugScalars;"
        )
    return "\n".join(lines) + "\n"


def check_params(kernel: Kernel, features: frozenset[str] | set[str], max_buffers: int) -> None:
    """CompileError for params WGSL cannot declare on this device (dtype, atomic vectors, binding
    count), and for a dtype the kernel uses (a param's or its source's) whose feature the device lacks."""
    for p in kernel.params:
        if p.dtype not in WGSL_TYPES:
            raise CompileError(
                f"param {p.name!r} is {p.dtype}, which WGSL cannot bind; use one of {', '.join(WGSL_TYPES)}",
                backend="webgpu",
                kernel=kernel.name,
            )
        if isinstance(p, Buffer) and p.atomic and p.vector > 1:
            raise CompileError(
                f"buffer {p.name!r} is atomic and vector={p.vector}; WGSL has no atomic vectors",
                backend="webgpu",
                kernel=kernel.name,
            )
    # The launcher refuses such a kernel first (launcher.check_dtypes, from the capabilities, which
    # are wgsl_dtypes too); this is the refusal of a direct compile (server.compile_kernel).
    lacking = kernel.lacking(wgsl_dtypes(features))
    if lacking is not None:
        dtype, use = lacking
        feature = DTYPE_FEATURES.get(dtype)
        why = f"the {feature!r} feature this device lacks" if feature else "a type WGSL does not have"
        raise CompileError(f"{use}, which needs {why}", backend="webgpu", kernel=kernel.name)
    needed = len(kernel.buffer_params) + (1 if kernel.scalar_params else 0)
    if needed > max_buffers:
        raise CompileError(
            f"the kernel needs {needed} storage bindings (buffers + scalars); this device allows "
            f"{max_buffers} per shader stage",
            backend="webgpu",
            kernel=kernel.name,
        )


def compile_error(kernel: Kernel, header: str, user_source: str, error: BaseException) -> CompileError:
    """A CompileError for a wgpu error, with line:column mapped to the user's source."""
    log = str(error)
    header_lines = header.count("\n")
    line = col = None
    match = _LOCATION.search(log)
    where = ""
    if match:
        gline, gcol = int(match.group(1)), int(match.group(2))
        if gline > header_lines:
            line, col = gline - header_lines, gcol
        else:
            where = f" (in the generated declarations, line {gline}: check the params and defines)"
    message = _summary(log) + where
    return CompileError(
        message,
        backend="webgpu",
        kernel=kernel.name,
        source=user_source,
        log=f"{log.rstrip()}\n--- generated declarations ---\n{header}",
        line=line,
        col=col,
    )


def _summary(log: str) -> str:
    """The most specific lines of a wgpu error message: the error and what the caret points at."""
    head = ""
    notes = []
    for text in log.splitlines():
        text = text.strip()
        caret = _CARET.search(text)
        if caret:
            notes.append(caret.group(1))
        elif text.startswith("= "):
            notes.append(text[2:])
        elif (
            not head
            and text
            and not text.startswith(("Validation Error", "Caused by", "In wgpu", "┌", "│"))
            and not text[0].isdigit()
        ):
            head = text
    head = head or (log.strip().splitlines()[0] if log.strip() else "unknown error")
    return "; ".join([head, *dict.fromkeys(notes)])


class WgslCompiler:
    """Builds pipelines for one GPUDevice; bind-group layouts are shared per (buffers, scalars) shape."""

    def __init__(self, device: Any, features: frozenset[str], max_storage_buffers: int) -> None:
        self.device = device
        self.features = features
        self.max_storage_buffers = max_storage_buffers
        self._layouts: dict[tuple[tuple[int, ...], int, tuple[bool, ...]], BindLayout] = {}
        self._bindings_ids: dict[tuple[int, tuple[bool, ...]], int] = {}

    def bind_layout(
        self, buffer_sizes: tuple[int, ...], scalar_size: int, read_only: tuple[bool, ...] = ()
    ) -> BindLayout:
        """The (cached) bind-group and pipeline layout for binding minimum sizes (0: no scalars),
        with the buffers ``read_only`` marks bound ``read-only-storage``.

        Every binding states its minimum size, so wgpu checks sizes when a bind group is made and
        never late at dispatch time (late checks mix up kernels that share a layout in one pass).
        """
        read_only = read_only if any(read_only) else ()
        key = (buffer_sizes, scalar_size, read_only)
        layout = self._layouts.get(key)
        if layout is None:
            import wgpu

            compute = wgpu.ShaderStage.COMPUTE
            ro = read_only or (False,) * len(buffer_sizes)
            entries: list[dict[str, Any]] = [
                {
                    "binding": i,
                    "visibility": compute,
                    "buffer": {"type": "read-only-storage" if ro[i] else "storage", "min_binding_size": size},
                }
                for i, size in enumerate(buffer_sizes)
            ]
            if scalar_size:
                entries.append(
                    {
                        "binding": len(buffer_sizes),
                        "visibility": compute,
                        "buffer": {
                            "type": "read-only-storage",
                            "has_dynamic_offset": True,
                            "min_binding_size": scalar_size,
                        },
                    }
                )
            bgl = self.device.create_bind_group_layout(entries=entries)
            pl = self.device.create_pipeline_layout(bind_group_layouts=[bgl])
            layout = BindLayout(next(_layout_ids), bgl, pl, buffer_sizes, scalar_size, read_only)
            self._layouts[key] = layout
        return layout

    def compile(self, kernel: Kernel, dialect: str, mode: ExecutionMode) -> WgslProgram:
        """Compile the kernel's WGSL source; CompileError with the mapped line:column on failure."""
        source = kernel.sources[dialect]
        if not isinstance(source, str):
            raise CompileError(
                f"wgsl sources are text, got {type(source).__name__}", backend="webgpu", kernel=kernel.name
            )
        check_params(kernel, self.features, self.max_storage_buffers)
        import wgpu

        structs = source.split("\n", 1)[0].rstrip() == wgsl.STRUCT_BUFFERS
        run_header = generate_header(kernel, enforce_access=False, structs=structs)
        reads = tuple(p.access == "read" and not p.atomic for p in kernel.buffer_params)
        read_only_source = None
        if any(reads):
            # Also the check of the declared access modes: naga refuses a store to a read binding.
            check_header = generate_header(kernel, enforce_access=True, structs=structs)
            try:
                self.device.create_shader_module(code=check_header + source)
            except wgpu.GPUError as e:
                raise compile_error(kernel, check_header, source, e) from e
            read_only_source = check_header + source
        code = run_header + source
        scalars = scalar_layout(kernel)
        if scalars is not None and scalars.binding_size > 1024:
            raise CompileError(
                f"the scalars take {scalars.binding_size} B; at most 1024 B of scalars fit a launch, "
                f"pass the rest in a buffer",
                backend="webgpu",
                kernel=kernel.name,
            )
        layout = self.bind_layout(
            tuple(_round4(p.itemsize) for p in kernel.buffer_params),
            scalars.binding_size if scalars is not None else 0,
        )
        unchecked = mode is ExecutionMode.UNCHECKED
        try:
            pipeline = self._pipeline(code, layout, unchecked, kernel.name, kernel.entry_point)
        except wgpu.GPUError as e:
            raise compile_error(kernel, run_header, source, e) from e
        bindings_id = self._bindings_ids.get((layout.id, reads))
        if bindings_id is None:
            bindings_id = self._bindings_ids[layout.id, reads] = next(_bindings_ids)
        return WgslProgram(
            pipeline, layout, scalars, code, run_header.count("\n"), reads, read_only_source,
            unchecked, kernel.name, kernel.entry_point, bindings_id,
        )

    def _pipeline(self, code: str, layout: BindLayout, unchecked: bool, label: str, entry_point: str) -> Any:
        module = trusted_module(self.device, code, label) if unchecked else None
        if module is None:
            module = self.device.create_shader_module(code=code)
        return self.device.create_compute_pipeline(
            layout=layout.pipeline_layout, compute={"module": module, "entry_point": entry_point}
        )

    def read_only(self, program: WgslProgram) -> tuple[Any, BindLayout]:
        """The program's pipeline and layout with its ``reads`` buffers bound read-only, built at
        the first call (a launch that can bind them so); wgpu.GPUError if the device fails it.

        The source compiled when the program did (it checked the access modes), so only a lost or
        full device should fail here; then the program keeps its ``read_write`` pipeline for good
        (``read_only_pipeline`` is set to it) and the error is raised. Built on demand because most
        launches bind slices of shared pages, where it cannot be used, and a pipeline costs a
        driver compile.
        """
        import wgpu

        built = program.read_only_pipeline
        if built is None:
            assert program.read_only_source is not None
            layout = self.bind_layout(program.layout.buffer_sizes, program.layout.scalar_size, program.reads)
            try:
                pipeline = self._pipeline(
                    program.read_only_source, layout, program.unchecked, program.label, program.entry_point
                )
            except wgpu.GPUError:
                program.read_only_pipeline = (program.pipeline, program.layout)
                raise
            built = program.read_only_pipeline = (pipeline, layout)
        return built


# The backend's own byte-copy kernel: copies and writes at any byte offset and size, and copies
# within one page (copy_buffer_to_buffer needs 4-byte alignment and two different buffers).
_COPY_WGSL = """
@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)
fn copy_bytes(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(num_workgroups) groups: vec3<u32>) {
    let stride = groups.x * CUBE_DIM_X;
    let lo = scalars.dst_shift;
    let hi = scalars.dst_shift + scalars.nbytes;
    for (var w = gid.x; w < scalars.words; w += stride) {
        var word = dst[w];
        for (var b = 0u; b < 4u; b++) {
            let p = w * 4u + b;
            if (p >= lo && p < hi) {
                let q = p - lo + scalars.src_shift;
                let byte = (src[q / 4u] >> ((q % 4u) * 8u)) & 0xFFu;
                word = (word & ~(0xFFu << (b * 8u))) | (byte << (b * 8u));
            }
        }
        dst[w] = word;
    }
}
"""
COPY_KERNEL = Kernel(
    "copy_bytes",
    [
        Buffer("src", "u32", "read"),
        Buffer("dst", "u32", "read_write"),
        Scalar("src_shift", "u32"),
        Scalar("dst_shift", "u32"),
        Scalar("nbytes", "u32"),
        Scalar("words", "u32"),
    ],
    {"wgsl": _COPY_WGSL},
    cube_dim=(256, 1, 1),
)
