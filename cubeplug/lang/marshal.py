"""Argument marshalling: the Python source of a specialization's launcher and of a kernel's fast
dispatcher.

Both split the positional arguments into the client's buffer and scalar lists and append the hidden
u32 scalars of the IR (:attr:`~cubeplug.lang.ir.KernelIR.hidden`): array lengths from the handles'
sizes, and a ``Tensor[T]`` argument's shape, strides and rank from the ``cubeplug.Tensor`` (whose
handle is the buffer). A checked launch also checks each tensor's rank (the number of indices the
kernel uses) and dtype, and turns a wrong kind of argument into a ValidationError (``cl__bad``);
the names ``cl__bad`` and ``cl__tensor`` must be in the namespace the source is run in.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from cubeplug.core.array import Array
from cubeplug.core.errors import ValidationError
from cubeplug.lang.compile import Specialized


def bad_argument(e: Exception) -> None:
    """``cl__bad``: the ValidationError for an argument of the wrong kind."""
    raise ValidationError(
        f"an Array argument must be a cubeplug Handle or a contiguous cubeplug.Array, a Tensor "
        f"argument a cubeplug.Tensor or cubeplug.Array with the dimensions the kernel uses "
        f"({type(e).__name__}: {e})"
    ) from e


def bad_tensor(t: Any, rank: int | None, dtype: str, name: str) -> None:
    """``cl__tensor``: the ValidationError for a tensor of the wrong rank or dtype."""
    if rank is not None and len(t.shape) != rank:
        raise ValidationError(
            f"Tensor argument {name!r}: the kernel indexes it with {rank} indices, got a tensor of "
            f"shape {tuple(t.shape)}"
        )
    raise ValidationError(f"Tensor argument {name!r} must hold {dtype}, got {t.dtype}")


def unwrap_arrays(e: Exception, args: tuple[Any, ...], positions: tuple[int, ...],
                  checked: bool) -> tuple[Any, ...]:
    """``cl__unwrap``: when the marshalling failed on a :class:`~cubeplug.Array` given for an array
    parameter, the arguments with those Arrays replaced by their handles (the launcher then runs
    again); else the error (a ValidationError when checked). Only reached after a failure: a launch
    of plain handles never calls it."""
    if not any(type(args[i]) is Array for i in positions):
        if checked:
            bad_argument(e)
        raise e
    out = list(args)
    for i in positions:
        a = args[i]
        if type(a) is Array:
            if not a.is_contiguous:
                raise ValidationError(
                    f"an Array argument takes contiguous memory; this view has shape {a.shape} and "
                    f"strides {a.strides}: pass view.copy(), or declare the parameter as a Tensor"
                ) from e
            out[i] = a.handle
    return tuple(out)


def _split(names: Sequence[str], spec: Specialized, checked: bool) -> tuple[list[str], list[str], list[str]]:
    """(lines that prepare the hidden values, buffer expressions, scalar expressions)."""
    k = spec.ir
    arrays = {a.name: a for a in k.arrays}
    arg = dict(zip(k.order, names))
    prep: list[str] = []
    bufs: list[str] = []
    scal: list[str] = []
    handle: dict[str, str] = {}
    for ir_name, kind, n in zip(k.order, spec.args, names):
        if kind == "scalar":
            scal.append(n)
            continue
        if kind == "array":
            handle[ir_name] = n
            bufs.append(n)
            continue
        a = arrays[ir_name]
        handle[ir_name] = f"cl__h_{n}"
        prep.append(f"cl__h_{n} = {n}.handle")
        bufs.append(f"cl__h_{n}")
        if checked:
            dtype = a.elem.np.name
            test = f"{n}.dtype != {dtype!r}"
            if a.rank is not None:
                test = f"len({n}.shape) != {a.rank} or {test}"
            prep.append(f"if {test}: cl__tensor({n}, {a.rank}, {dtype!r}, {ir_name!r})")
    for j, h in enumerate(k.hidden):
        n = arg[h.array]
        if h.what == "len":
            a = arrays[h.array]
            shift = (a.elem.np.itemsize * a.elem.lanes).bit_length() - 1
            hd = handle[h.array]
            value = f"({hd}.nbytes - {hd}.start - {hd}.end) >> {shift}"
        elif h.what == "rank":
            value = f"len({n}.shape)"
        else:
            value = f"{n}.{'shape' if h.what == 'shape' else 'strides'}[{h.dim}]"
        prep.append(f"cl__m{j} = {value}")
        scal.append(f"cl__m{j}")
    return prep, bufs, scal


def _guarded(prep: list[str], checked: bool, indent: str, retry: str = "") -> list[str]:
    """The preparing lines in a ``try`` (free until raised) whose handler runs ``retry`` (the launch
    again with Arrays unwrapped, :func:`unwrap_arrays`), or reports the bad argument."""
    if not prep:
        return []
    if not checked and not retry:
        return [indent + line for line in prep]
    handler = retry or "cl__bad(e)"
    return [f"{indent}try:", *(f"{indent}    {line}" for line in prep),
            f"{indent}except (AttributeError, IndexError, TypeError) as e:", f"{indent}    {handler}"]


def _retry(call: str, names: Sequence[str], spec: Specialized, checked: bool) -> str:
    """The handler line that launches again with the Arrays of array parameters unwrapped."""
    positions = tuple(i for i, kind in enumerate(spec.args) if kind == "array")
    if not positions:
        return ""
    args = ", ".join(names) + ("," if len(names) == 1 else "")
    return f"return {call}*cl__unwrap(e, ({args}), {positions!r}, {checked}))"


def _client_launch(checked: bool) -> str:
    """The client's method a launch calls: the launchers take the client as an argument and hold
    none (a client dropped without ``close()`` is collected; see ``LangKernel``'s caches)."""
    return "launch" if checked else "launch_unchecked"


def launcher_source(name: str, spec: Specialized, checked: bool) -> str:
    """Python source of the argument marshalling for one specialization: a function
    ``launch(client, count, *args)`` that splits buffers from scalars, appends the hidden scalars
    and calls ``client.launch(kernel, ...)`` (no per-launch lowering, hashing or loops)."""
    names = [f"a{i}" for i in range(len(spec.args))]
    prep, bufs, scal = _split(names, spec, checked)
    retry = _retry(f"{name}_launch(client, count, ", names, spec, checked)
    lines = [f"def {name}_launch({', '.join(['client', 'count', *names])}):",
             *_guarded(prep, checked, "    ", retry),
             f"    client.{_client_launch(checked)}(kernel, count, [{', '.join(bufs)}], [{', '.join(scal)}])"]
    return "\n".join(lines) + "\n"


def dispatcher_source(name: str, params: tuple[str, ...], spec: Specialized, checked: bool,
                      via_launcher: bool = False, comptime_names: tuple[str, ...] = ()) -> str:
    """Python source of a kernel's fast ``launch``: when the client, cube dim and comptime values
    (and their types) are those of the previous launch (state ``cl__state[0] = (weak reference to
    the client, cube_dim, kernel, comptime, launcher, comptime types)``, read once so that a
    concurrent update is seen whole), it splits the arguments and calls the client directly or,
    ``via_launcher`` (a kernel with comptime parameters, whose specializations differ), calls the
    remembered launcher; anything else goes to ``cl__slow``. ``params`` are the positional
    parameter names; a missing one (the sentinel) or an extra one takes the slow path, which
    reports it."""
    sig = ", ".join(["cl__client", "cl__count", "cl__dim", *(f"{p}=cl__NO" for p in params),
                     "*cl__more", "**cl__comptime"])
    last = f" and {params[-1]} is not cl__NO" if params else ""
    # Equal comptime values of the same types (cl__s[5]): 1, 1.0 and True are equal in Python but
    # are other specializations, or refused by the parameter's Comptime annotation.
    types = "".join(f" and type(cl__comptime[{n!r}]) is cl__s[5][{i}]" for i, n in enumerate(comptime_names))
    same = f"cl__comptime == cl__s[3]{types}" if via_launcher else "not cl__comptime"
    # cl__s[0] is a weak reference (a kernel must not keep a dropped client alive): calling it cost
    # 3-4 % of the dispatcher's host time (paired, 41 rounds, a stubbed client launcher, 2-core
    # machine: 618 -> 652 ns median checked, 563 -> 586 unchecked, 854 -> 874 with comptime).
    lines = [
        f"def {name}_launch({sig}):",
        "    cl__s = cl__state[0]",
        f"    if cl__client is cl__s[0]() and cl__dim == cl__s[1] and {same} and not cl__more{last}:",
    ]
    if via_launcher:
        lines.append(f"        cl__s[4]({', '.join(['cl__client', 'cl__count', *params])})")
    else:
        prep, bufs, scal = _split(params, spec, checked)
        lines += [
            *_guarded(prep, checked, "        ",
                      _retry(f"{name}_launch(cl__client, cl__count, cl__dim, ", params, spec, checked)),
            f"        cl__client.{_client_launch(checked)}(cl__s[2], cl__count, [{', '.join(bufs)}], "
            f"[{', '.join(scal)}])",
        ]
    lines.append("        return")
    args = ", ".join(params)
    lines.append(f"    cl__slow(cl__client, cl__count, cl__dim, ({args}{',' if len(params) == 1 else ''}) "
                 f"+ cl__more, cl__comptime)")
    return "\n".join(lines) + "\n"

