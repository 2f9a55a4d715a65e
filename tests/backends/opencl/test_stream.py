"""OpenCL streams: in-order queues, markers, device-side waits across queues, the event waiter."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from cubeplug import LaunchError
from cubeplug.backends.opencl.devices import device_context
from cubeplug.backends.opencl.stream import EventWaiter, OpenCLStreams
from cubeplug.core.config import Config
from tests.backends.opencl.conftest import requires_opencl

pytestmark = requires_opencl

SLOW = """
__kernel void slow(__global int* x, int rounds) {
    size_t i = get_global_id(0);
    int v = x[i];
    for (int r = 0; r < rounds; ++r) v = (v * 1103515245 + 12345) & 0x7fffffff;
    x[i] = v + 1 - v;  /* = 1, after a lot of work */
}
"""


def test_barrier_orders_two_queues() -> None:
    import pyopencl as cl

    ctx = device_context(0, Config())
    streams = OpenCLStreams(ctx)
    q1, q2 = streams.create_stream(), streams.create_stream()
    assert q1 is not q2
    n = 1 << 16
    buf = cl.Buffer(ctx.context, cl.mem_flags.READ_WRITE, n * 4)
    cl.enqueue_fill_buffer(q1, buf, np.int32(0), 0, n * 4)
    prg = cl.Program(ctx.context, SLOW).build()
    prg.slow(q1, (n,), None, buf, np.int32(2000))
    event = streams.flush(q1)
    streams.wait_event(q2, event)
    out = np.empty(n, np.int32)
    cl.enqueue_copy(q2, out, buf, is_blocking=True)
    assert (out == 1).all()
    streams.wait_event_sync(streams.flush(q2))
    assert event.command_execution_status == cl.command_execution_status.COMPLETE


def test_profiling_follows_the_option() -> None:
    import pyopencl as cl

    ctx = device_context(0, Config())
    on, off = OpenCLStreams(ctx, profiling=True), OpenCLStreams(ctx, profiling=False)
    flag = cl.command_queue_properties.PROFILING_ENABLE
    assert on.create_stream().properties & flag == (flag if on.profiling else 0)
    assert off.create_stream().properties & flag == 0


def test_failed_event_raises_launch_error() -> None:
    ctx = device_context(0, Config())
    streams = OpenCLStreams(ctx)

    class Broken:
        command_execution_status = -5

        def wait(self) -> None:
            return None

    with pytest.raises(LaunchError, match="execution status -5"):
        streams.wait_event_sync(Broken())


def test_event_waiter_calls_back_in_order() -> None:
    ctx = device_context(0, Config())
    streams = OpenCLStreams(ctx)
    waiter = EventWaiter(streams)
    q = streams.create_stream()
    seen: list[object] = []
    done = threading.Event()
    waiter.submit(streams.flush(q), lambda err: seen.append(("first", err)))

    class Broken:
        command_execution_status = -1

        def wait(self) -> None:
            return None

    waiter.submit(Broken(), lambda err: seen.append(("second", type(err).__name__)))
    waiter.submit(streams.flush(q), lambda err: (_ for _ in ()).throw(RuntimeError("callback bug")))
    waiter.submit(streams.flush(q), lambda err: done.set())
    assert done.wait(30)
    assert seen == [("first", None), ("second", "LaunchError")]
    waiter.close()
