"""Launch argument checks generated once per kernel and server (the checked launch's hot path).

A checked launch must verify every buffer (a live handle of this server, aligned, a whole number
of elements) and every scalar (the right count, a value that fits its dtype). A loop over the
params does that in a few hundred nanoseconds per argument; the function :func:`make_checker`
writes instead (as PyOpenCL's invoker and dataclasses do) has the params unrolled, the constants
inlined and one test per argument. It accepts only the plain case (Handles, Python ints and floats
in range); anything else, including every error, goes to the general check, which gives the
precise message or converts the value (numpy scalars, integral floats).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import Kernel

#: ``check(server, buffers, scalars) -> scalars``: the scalars to launch with, or an exception.
Checker = Callable[[Any, Sequence[Any], Sequence[Any]], Sequence[Any]]


def make_checker(kernel: Kernel, alignment: int, general: Callable[..., Sequence[Any]]) -> Checker:
    """A checker of ``kernel``'s launch arguments on a server whose offsets align to ``alignment``.

    ``general(server, kernel, buffers, scalars)`` is the full check; the generated function calls
    it whenever an argument is not of the plain kind it tests inline. The server is an argument, not
    a captured constant, so that a server caching its checkers sits in no reference cycle.
    """
    bufs = [f"b{i}" for i in range(len(kernel.buffer_params))]
    vals = [f"s{i}" for i in range(len(kernel.scalar_params))]
    tests: list[str] = []
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
    lines = ["def check(owner, buffers, scalars):"]
    if bufs:
        lines.append(f"    if len(buffers) != {len(bufs)}: return general(owner, kernel, buffers, scalars)")
        lines.append(f"    {', '.join(bufs)}, = buffers")
    if vals:
        lines.append(
            f"    if type(scalars) is not list and type(scalars) is not tuple or len(scalars) != {len(vals)}:"
        )
        lines.append("        return general(owner, kernel, buffers, scalars)")
        lines.append(f"    {', '.join(vals)}, = scalars")
    else:
        lines.append("    if scalars: return general(owner, kernel, buffers, scalars)")
    if tests:
        lines.append(f"    if not ({' and '.join(tests)}): return general(owner, kernel, buffers, scalars)")
    lines.append("    return scalars")
    namespace: dict[str, Any] = {"Handle": Handle, "kernel": kernel, "general": general}
    source = "\n".join(lines)
    exec(compile(source, f"<cubeplug launch check of {kernel.name}>", "exec"), namespace)
    check: Checker = namespace["check"]
    return check
