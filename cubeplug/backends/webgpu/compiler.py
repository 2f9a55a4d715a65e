"""The ``wgsl`` kernel dialect: generated declarations (docs/kernels.md), pipelines and error mapping.

The backend writes the declarations and the user's source provides the entry point with
``@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)``. Buffer ``i`` is
``@group(0) @binding(i)``, named as its param and typed ``array<T>`` (``array<vec4<T>>`` for vector
buffers, ``array<atomic<T>>`` for atomic ones); the scalars are one read-only storage struct bound
after the buffers as ``scalars``; ``defines`` and the cube dim are ``const``\\ s.

WebGPU forbids one buffer from being bound read-only and read-write in the same dispatch, and the
memory pools put many slices in one page buffer. So the pipeline is built from declarations that
are all ``read_write``, while the declared access modes are still enforced: the source is first
validated with ``var<storage, read>`` for ``read`` params, so writing a read buffer is a
CompileError.

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


@dataclass(frozen=True, slots=True)
class ScalarLayout:
    """How the scalars of a kernel are packed: the struct's byte layout and its binding size."""

    packer: struct.Struct
    #: Bytes of the WGSL struct rounded up to 4 (a storage binding size must be a multiple of 4).
    binding_size: int


@dataclass(frozen=True, slots=True)
class BindLayout:
    """A bind-group layout shared by the kernels whose bindings have the same minimum sizes."""

    id: int
    bind_group_layout: Any
    pipeline_layout: Any
    n_buffers: int
    #: Bytes of the scalars binding (0: the kernel has no scalars).
    scalar_size: int


@dataclass(frozen=True, slots=True)
class WgslProgram:
    """A compiled WGSL kernel: the pipeline, its bind layout, the scalar packing and the sources."""

    pipeline: Any
    layout: BindLayout
    scalars: ScalarLayout | None
    source: str
    header_lines: int


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
        self._layouts: dict[tuple[tuple[int, ...], int], BindLayout] = {}

    def bind_layout(self, buffer_sizes: tuple[int, ...], scalar_size: int) -> BindLayout:
        """The (cached) bind-group and pipeline layout for binding minimum sizes (0: no scalars).

        Every binding states its minimum size, so wgpu checks sizes when a bind group is made and
        never late at dispatch time (late checks mix up kernels that share a layout in one pass).
        """
        key = (buffer_sizes, scalar_size)
        layout = self._layouts.get(key)
        if layout is None:
            import wgpu

            compute = wgpu.ShaderStage.COMPUTE
            entries: list[dict[str, Any]] = [
                {"binding": i, "visibility": compute, "buffer": {"type": "storage", "min_binding_size": size}}
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
            layout = BindLayout(next(_layout_ids), bgl, pl, len(buffer_sizes), scalar_size)
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
        if any(p.access == "read" and not p.atomic for p in kernel.buffer_params):
            check_header = generate_header(kernel, enforce_access=True, structs=structs)
            try:
                self.device.create_shader_module(code=check_header + source)
            except wgpu.GPUError as e:
                raise compile_error(kernel, check_header, source, e) from e
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
        try:
            unchecked = mode is ExecutionMode.UNCHECKED
            module = trusted_module(self.device, code, kernel.name) if unchecked else None
            if module is None:
                module = self.device.create_shader_module(code=code)
            pipeline = self.device.create_compute_pipeline(
                layout=layout.pipeline_layout,
                compute={"module": module, "entry_point": kernel.entry_point},
            )
        except wgpu.GPUError as e:
            raise compile_error(kernel, run_header, source, e) from e
        return WgslProgram(pipeline, layout, scalars, code, run_header.count("\n"))


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
