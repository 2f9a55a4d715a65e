"""Checked launches generated once per kernel and server: the launch hot path.

A checked launch verifies every buffer (a live handle of this server, aligned, a whole number of
elements) and every scalar (the right count, a value that fits its dtype), skips an empty count,
and queues the kernel. A loop over the params does the checks in a few hundred nanoseconds per
argument; the *plan* :func:`make_plan` writes instead (as PyOpenCL's invoker and dataclasses do) has
the params unrolled, the constants inlined, one test per argument, and calls the server's
``execute`` itself. It accepts only the plain case (Handles, Python ints and floats in range, a
static count); anything else, including every error, goes to the general path, which gives the
precise message or converts the value (numpy scalars, integral floats).

A backend may also hand the plan its queueing as source (:class:`QueueCode`, from
``ComputeServer.queue_code``): the plan then takes the streams' common case inline too (every
buffer allocated and last used by streams of the launching stream's slot: no wait, no pin, as
:meth:`MultiStream.enter <cubeplug.core.stream.MultiStream.enter>` would find) and runs the
backend's lines on the native stream, so that a launch is a single Python frame below the client.
Any other case calls the server's ``execute``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from cubeplug.core.handle import Handle
from cubeplug.core.kernel import COUNT_MAX, Kernel

#: ``plan(server, count, buffers, scalars, stream_id)``: checks, then queues the launch.
Plan = Callable[[Any, Any, Sequence[Any], Sequence[Any], int], None]


@dataclass
class QueueCode:
    """A backend's launch of one kernel as source lines, for the plan to inline.

    The lines run once the arguments passed the checks and the streams' common case holds. They
    see the plan's names: ``owner`` (the server), ``count`` (a static CubeCount with no zero),
    ``buffers`` and ``scalars`` as given, ``b0, b1, ...`` (the buffer Handles), ``t0, t1, ...``
    (their slice tokens), ``s0, s1, ...`` (the scalar values: checked, or as the caller gave them
    in an unchecked plan, so the lines turn a value that does not pack into a ValidationError),
    ``sid`` and ``stream`` (the native stream of ``sid``'s slot, whose cursor was already
    advanced), plus ``namespace``.
    """

    lines: Sequence[str]
    #: Names the lines use besides the plan's own (never the server: no reference cycle).
    namespace: dict[str, Any] = field(default_factory=dict)
    #: The server's MultiStream: its stream states by slot (``streams._slots``) and slot count.
    multistream: Any = None


def make_plan(
    kernel: Kernel,
    compiled: Any,
    alignment: int,
    general: Callable[..., None],
    queue: QueueCode | None = None,
    checked: bool = True,
    max_count: tuple[int, int, int] = (COUNT_MAX, COUNT_MAX, COUNT_MAX),
) -> Plan:
    """The checked launch of ``kernel`` (already ``compiled``) on a server whose offsets align to
    ``alignment``; with ``checked=False``, the unchecked launch.

    ``general(server, kernel, compiled, count, buffers, scalars, stream_id)`` is the full path; the
    plan calls it whenever an argument is not of the plain kind it tests inline. The server is an
    argument, not a captured constant, so that a server caching its plans sits in no reference cycle.
    An unchecked plan tests only what the inlined queueing needs (live handles of this server, a
    static count, a list or tuple of as many scalars as declared); the values go as given.
    Either plan sends a count beyond the device's ``max_count`` (per axis) to ``general``.
    """
    bufs = [f"b{i}" for i in range(len(kernel.buffer_params))]
    vals = [f"s{i}" for i in range(len(kernel.scalar_params))]
    tests = _tests(kernel, bufs, vals, alignment, checked, max_count)
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
    execute = "owner.execute(sid, compiled, count, buffers, scalars)"
    namespace: dict[str, Any] = {"Handle": Handle, "kernel": kernel, "compiled": compiled, "general": general}
    if queue is None:
        lines.append(f"        {execute}")
    else:
        namespace.update(queue.namespace)
        namespace["slots"] = queue.multistream.streams.slots
        lines += [f"        {line}" for line in _inline_queue(queue, len(bufs), execute)]
    source = "\n".join(lines)
    what = "launch plan" if checked else "unchecked launch plan"
    exec(compile(source, f"<cubeplug {what} of {kernel.name}>", "exec"), namespace)
    plan: Plan = namespace.pop("plan")  # not left in its own globals: no reference cycle
    return plan


def _tests(
    kernel: Kernel,
    bufs: list[str],
    vals: list[str],
    alignment: int,
    checked: bool,
    max_count: tuple[int, int, int],
) -> list[str]:
    """The plan's inline tests: all true means the plain case (anything else takes the general path)."""
    tests: list[str] = ["count.handle is None"]
    # The device's limits on the count (a count beyond one goes to the general path, which says so);
    # an axis that allows every CubeCount costs no test.
    tests += [f"count.{a} <= {m}" for a, m in zip("xyz", max_count, strict=True) if m < COUNT_MAX]
    for name, itemsize in zip(bufs, kernel.buffer_itemsizes, strict=True):
        tests.append(f"type({name}) is Handle and {name}.owner is owner and {name}.token is not None")
        if alignment > 1 and checked:
            tests.append(f"not {name}.start % {alignment}")
        if itemsize > 1 and checked:
            tests.append(f"not ({name}.nbytes - {name}.start - {name}.end) % {itemsize}")
    for name, (ctype, lo, hi, _) in zip(vals, kernel.scalar_checks, strict=True) if checked else ():
        if ctype is int or ctype is float:
            tests.append(f"type({name}) is {ctype.__name__} and {lo!r} <= {name} <= {hi!r}")
        else:  # bools and the like always take the general path
            tests.append("False")
    return tests


def _inline_queue(queue: QueueCode, nbufs: int, execute: str) -> list[str]:
    """The plan's lines after the checks: the streams' common case of ``MultiStream.enter`` (every
    buffer's owner and last user in the launching stream's slot: nothing to wait for, nothing to
    pin), then the backend's lines; anything else calls ``execute``. Keep in step with ``enter``."""
    m = queue.multistream.max_streams
    lines = [f"index = sid % {m}", "state = slots[index]"]
    common = ["state is not None"]
    for i in range(nbufs):
        lines += [f"t{i} = b{i}.token", f"l{i} = t{i}.stream"]
        common.append(  # the usual case first: memory of this very stream
            f"(b{i}.stream == sid or b{i}.stream % {m} == index)"
            f" and (l{i} == sid or l{i} < 0 or l{i} % {m} == index)"
        )
    lines += [f"if not ({' and '.join(common)}):", f"    return {execute}"]
    lines += [f"t{i}.stream = sid" for i in range(nbufs)]
    lines += ["state.cursor += 1", "stream = state.stream", *queue.lines]
    return lines
