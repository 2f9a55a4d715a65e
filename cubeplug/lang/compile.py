"""The compile driver: one specialization of a kernel to a plain :class:`cubeplug.Kernel`.

``specialize`` lowers, verifies and generates the source for one dialect; the result needs no
kernel-language knowledge from the backend. The generated source is deterministic, so the
backends' compile caches hit across runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from cubeplug.core.kernel import Buffer, Kernel, Param, Scalar
from cubeplug.lang import codegen_c, codegen_wgsl, ir
from cubeplug.lang.errors import KernelError, KernelTypeError, Loc
from cubeplug.lang.interp import Interpreter
from cubeplug.lang.lower import Lowerer
from cubeplug.lang.names import entry_name
from cubeplug.lang.source import Captured
from cubeplug.lang.verify import verify

#: The dialects the language generates, in the order it prefers them.
DIALECTS = ("c", "wgsl", "python")


@dataclass(frozen=True)
class Specialized:
    """A specialized kernel: the runtime Kernel, its IR, and how positional arguments map to it."""

    kernel: Kernel
    ir: ir.KernelIR
    dialect: str
    source: Any
    line_map: tuple[Loc | None, ...]
    #: Per positional argument: "array", "tensor" or "scalar".
    args: tuple[str, ...]


def pick_dialect(dialects: tuple[str, ...]) -> str | None:
    """The first of a backend's dialects the language can generate."""
    for d in dialects:
        if d in DIALECTS:
            return d
    return None


def check_shared(k: ir.KernelIR, limit: int) -> None:
    """KernelTypeError, at the ``cl.shared`` that goes past it, when the kernel's shared arrays need
    more than the ``limit`` bytes a cube may use (a backend would fail to build or, as PoCL does,
    abort the process)."""
    total = 0
    for d in k.decls:
        if d.space != "shared":
            continue
        size = d.size * d.elem.np.itemsize * d.elem.lanes
        total += size
        if total > limit:
            raise KernelTypeError(
                f"cl.shared arrays need {total} bytes a cube up to this one ({d.name}: {d.size} x {d.elem} = "
                f"{size} bytes), more than the {limit} bytes this device allows a cube "
                f"(capabilities.max_shared_bytes): use smaller tiles or fewer shared arrays",
                d.loc, "shared", kernel=k.name,
            )


def specialize(
    captured: Captured,
    name: str,
    comptime: dict[str, Any],
    cube_dim: tuple[int, int, int],
    checked: bool,
    dialect: str,
    dtypes: frozenset[str] | None,
    shared_limit: int | None = None,
) -> Specialized:
    """Lower, verify and generate ``captured`` for one set of comptime values, cube dim and dialect
    (on a device allowing ``shared_limit`` bytes of shared memory a cube, where given)."""
    try:
        lowered = Lowerer(captured, name, comptime, cube_dim, checked, dtypes).kernel()
        k = lowered.ir
        verify(k)
        if shared_limit is not None:
            check_shared(k, shared_limit)
    except KernelError as e:
        named = e.of_kernel(name)
        if named is e:
            raise
        raise named from None
    source: Any
    line_map: tuple[Loc | None, ...] = ()
    if dialect == "c":
        source, line_map = codegen_c.generate(k)
    elif dialect == "wgsl":
        source, line_map = codegen_wgsl.generate(k)
    elif dialect == "python":
        source = Interpreter(k)
    else:
        raise ValueError(f"cubeplug.lang generates {DIALECTS}, not {dialect!r}")
    arrays = {a.name: a for a in k.arrays}
    scalars = {s.name: s for s in k.scalars}
    params: list[Param] = []
    args: list[str] = []
    for pname in k.order:
        if pname in arrays:
            a = arrays[pname]
            written = a.written or a.atomic
            # An f32 atomic array binds as u32 (WGSL array<atomic<u32>>); the code reinterprets the bits.
            dtype = "u32" if a.atomic and a.elem.is_float else a.elem.scalar.name
            params.append(Buffer(pname, dtype, "read_write" if written else "read",
                                 vector=a.elem.lanes, atomic=a.atomic))
            args.append("tensor" if a.tensor else "array")
        else:
            params.append(Scalar(pname, scalars[pname].ty.name))
            args.append("scalar")
    params += [Scalar(n, "u32") for n in k.hidden_names]
    # The types the source uses (f16 locals in a kernel of f32 arrays; Kernel keeps those beyond
    # CORE_DTYPES): the backends enable them and a device lacking one refuses the kernel by name.
    kernel = Kernel(name, params, {dialect: source}, cube_dim=cube_dim, entry=entry_name(name),
                    dtypes=ir.scalar_types(k))
    return Specialized(kernel, k, dialect, source, line_map, tuple(args))
