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
from cubeplug.lang.errors import Loc
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
    #: Per positional argument: (is_array, element size in bytes when its length is passed, else 0).
    args: tuple[tuple[bool, int], ...]


def pick_dialect(dialects: tuple[str, ...]) -> str | None:
    """The first of a backend's dialects the language can generate."""
    for d in dialects:
        if d in DIALECTS:
            return d
    return None


def specialize(
    captured: Captured,
    name: str,
    comptime: dict[str, Any],
    cube_dim: tuple[int, int, int],
    checked: bool,
    dialect: str,
    dtypes: frozenset[str] | None,
) -> Specialized:
    """Lower, verify and generate ``captured`` for one set of comptime values, cube dim and dialect."""
    lowered = Lowerer(captured, name, comptime, cube_dim, checked, dtypes).kernel()
    k = lowered.ir
    verify(k)
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
    args: list[tuple[bool, int]] = []
    for pname in k.order:
        if pname in arrays:
            a = arrays[pname]
            written = a.written or a.atomic
            params.append(Buffer(pname, a.elem.name, "read_write" if written else "read", atomic=a.atomic))
            args.append((True, a.elem.np.itemsize if a.len_name else 0))
        else:
            params.append(Scalar(pname, scalars[pname].ty.name))
            args.append((False, 0))
    params += [Scalar(n, "u32") for n in k.hidden_lengths]
    kernel = Kernel(name, params, {dialect: source}, cube_dim=cube_dim, entry=entry_name(name))
    return Specialized(kernel, k, dialect, source, line_map, tuple(args))


def launcher_source(name: str, spec: Specialized, checked: bool) -> str:
    """Python source of the argument marshalling for one specialization: a function
    ``launch(count, *args)`` that splits buffers from scalars, appends the hidden lengths and calls
    the client's launch (no per-launch lowering, hashing or loops)."""
    names = [f"a{i}" for i in range(len(spec.args))]
    bufs = [n for n, (is_array, _) in zip(names, spec.args) if is_array]
    scal = [n for n, (is_array, _) in zip(names, spec.args) if not is_array]
    lens = []
    for n, (is_array, size) in zip(names, spec.args):
        if is_array and size:
            lens.append(f"l{n} = ({n}.nbytes - {n}.start - {n}.end) >> {size.bit_length() - 1}")
            scal.append(f"l{n}")
    head = f"def {name}_launch({', '.join(['count', *names])}):\n"
    call = f"    client_launch(kernel, count, [{', '.join(bufs)}], [{', '.join(scal)}])\n"
    if not lens:
        return head + call
    if not checked:
        return head + "".join(f"    {text}\n" for text in lens) + call
    body = "".join(f"        {text}\n" for text in lens)
    return head + f"    try:\n{body}    except AttributeError as e:\n        bad_argument(e)\n" + call


def dispatcher_source(name: str, params: tuple[str, ...], spec: Specialized, checked: bool) -> str:
    """Python source of a kernel's fast ``launch``: when the client and cube dim are those of the
    previous launch and no comptime values are given, it splits the arguments and calls the client
    directly (state ``cl__state[0] = (client, cube_dim, client_launch, kernel)``, read once so that
    a concurrent update is seen whole); anything else goes to ``cl__slow``. ``params`` are the
    positional parameter names; a missing one (the sentinel) or an extra one takes the slow path,
    which reports it."""
    bufs = [n for n, (is_array, _) in zip(params, spec.args) if is_array]
    scal = [n for n, (is_array, _) in zip(params, spec.args) if not is_array]
    lens = []
    for n, (is_array, size) in zip(params, spec.args):
        if is_array and size:
            lens.append(f"cl__l_{n} = ({n}.nbytes - {n}.start - {n}.end) >> {size.bit_length() - 1}")
            scal.append(f"cl__l_{n}")
    sig = ", ".join(["cl__client", "cl__count", "cl__dim", *(f"{p}=cl__NO" for p in params),
                     "*cl__more", "**cl__comptime"])
    last = f" and {params[-1]} is not cl__NO" if params else ""
    lines = [
        f"def {name}_launch({sig}):",
        "    cl__s = cl__state[0]",
        f"    if cl__client is cl__s[0] and cl__dim == cl__s[1] and not cl__comptime and not cl__more{last}:",
    ]
    if lens and checked:
        lines.append("        try:")
        lines += [f"            {text}" for text in lens]
        lines += ["        except AttributeError as e:", "            cl__bad(e)"]
    else:
        lines += [f"        {text}" for text in lens]
    lines.append(f"        cl__s[2](cl__s[3], cl__count, [{', '.join(bufs)}], [{', '.join(scal)}])")
    lines.append("        return")
    args = ", ".join(params)
    lines.append(f"    cl__slow(cl__client, cl__count, cl__dim, ({args}{',' if len(params) == 1 else ''}) "
                 f"+ cl__more, cl__comptime)")
    return "\n".join(lines) + "\n"
