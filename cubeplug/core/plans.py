"""Checked launches generated once per kernel and server: the launch hot path.

A checked launch verifies every buffer (a live handle of this server, aligned, a whole number of
elements) and every scalar (the right count, a value that fits its dtype), skips an empty count,
and queues the kernel. A loop over the params does the checks in a few hundred nanoseconds per
argument; the *plan* :func:`make_plan` writes instead (as PyOpenCL's invoker and dataclasses do) has
the params unrolled, the constants inlined, one test per argument, and calls the server's
``execute`` itself. It accepts only the plain case (Handles, Python ints and floats in range, a
static count); anything else, including every error, goes to the general path, which gives the
precise message or converts the value (numpy scalars, integral floats).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Kernel

#: ``plan(server, count, buffers, scalars, stream_id)``: checks, then queues the launch.
Plan = Callable[[Any, Any, Sequence[Any], Sequence[Any], int], None]


def make_plan(kernel: Kernel, compiled: Any, alignment: int, general: Callable[..., None]) -> Plan:
    """The checked launch of ``kernel`` (already ``compiled``) on a server whose offsets align to
    ``alignment``.

    ``general(server, kernel, compiled, count, buffers, scalars, stream_id)`` is the full path; the
    plan calls it whenever an argument is not of the plain kind it tests inline. The server is an
    argument, not a captured constant, so that a server caching its plans sits in no reference cycle.
    """
    bufs = [f"b{i}" for i in range(len(kernel.buffer_params))]
    vals = [f"s{i}" for i in range(len(kernel.scalar_params))]
    tests: list[str] = ["count.handle is None"]
    for name, itemsize in zip(bufs, kernel.buffer_itemsizes, strict=True):
        tests.append(f"type({name}) is Handle and {name}._owner is owner and {name}._memory is not None")
        if alignment > 1:
            tests.append(f"not {name}.start % {alignment}")
        if itemsize > 1:
            tests.append(f"not ({name}.nbytes - {name}.start - {name}.end) % {itemsize}")
    for name, (ctype, lo, hi, _) in zip(vals, kernel._scalar_checks, strict=True):
        if ctype is int or ctype is float:
            tests.append(f"type({name}) is {ctype.__name__} and {lo!r} <= {name} <= {hi!r}")
        else:  # bools and the like always take the general path
            tests.append("False")
    slow = "return general(owner, kernel, compiled, count, buffers, scalars, sid)"
    lines = ["def plan(owner, count, buffers, scalars, sid):"]
    if bufs:
        lines.append(f"    if len(buffers) != {len(bufs)}: {slow}")
        lines.append(f"    {', '.join(bufs)}, = buffers")
    if vals:
        lines.append(
            f"    if type(scalars) is not list and type(scalars) is not tuple or len(scalars) != {len(vals)}:"
        )
        lines.append(f"        {slow}")
        lines.append(f"    {', '.join(vals)}, = scalars")
    else:
        lines.append(f"    if scalars: {slow}")
    lines.append(f"    if not ({' and '.join(tests)}): {slow}")
    lines.append("    if count.x and count.y and count.z:")
    lines.append("        owner.execute(sid, compiled, count, buffers, scalars)")
    namespace: dict[str, Any] = {"Handle": Handle, "kernel": kernel, "compiled": compiled, "general": general}
    source = "\n".join(lines)
    exec(compile(source, f"<cubeplug launch plan of {kernel.name}>", "exec"), namespace)
    plan: Plan = namespace.pop("plan")  # not left in its own globals: no reference cycle
    return plan
