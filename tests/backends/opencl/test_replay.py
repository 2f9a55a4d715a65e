"""The OpenCL replays of captured graphs (backends/opencl/replay.py): the command buffer where the
device has ``cl_khr_command_buffer`` (PoCL 3.1 here), pre-bound kernels elsewhere, each checked
against numpy, repeated, interleaved with eager launches of other threads, and released on close.

Every test of the ``client`` fixture runs on each replay the backend has: the command buffer (with
simultaneous use, as PoCL offers it, and without it, forced: the ring of copies), and the pre-bound
kernels through the C loop and through its Python twin. The suite's ``Capture`` tests run through
the default one (``python -m cubeplug conformance opencl -k Capture``).
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cubeplug import CubeCount, ExecutionMode, LaunchError, ValidationError
from cubeplug.backends.opencl import launch_path, replay
from cubeplug.backends.opencl.compiler import clone_program
from tests.backends.opencl.conftest import make_client, requires_opencl
from tests.backends.opencl.kernels import ADD_ONE, AXPY, FILL
from tests.backends.opencl.test_release import _opencl_garbage

pytestmark = requires_opencl

COMMAND_BUFFER = "cl_khr_command_buffer"
PREBOUND = "pre-bound kernels"

#: (replay mode, client options, whether the device must have command buffers).
MODES = {
    "command-buffer": ({"command_buffers": True}, True),
    "command-buffer-ring": ({"command_buffers": True}, True),
    "prebound-c": ({"command_buffers": False}, False),
    "prebound-python": ({"command_buffers": False, "native_launch": False}, False),
}


def _api(client: Any) -> replay.CommandBufferApi | None:
    return replay.command_buffer_api(client.server.ctx.device)


@pytest.fixture(params=list(MODES))
def client(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> Iterator[Any]:
    options, needs_command_buffers = MODES[request.param]
    c = make_client(opencl=options)
    api = _api(c)
    if needs_command_buffers and api is None:
        name = c.server.ctx.name
        c.close()
        pytest.skip(f"{name} has no usable cl_khr_command_buffer")
    if request.param == "command-buffer-ring":
        assert api is not None
        monkeypatch.setattr(api, "simultaneous", False)  # as on a device without simultaneous use
        monkeypatch.setattr(api, "flag", False)
    if request.param == "prebound-c" and launch_path.load() is None:
        c.close()
        pytest.skip(f"the C launcher is not in use: {launch_path.status()}")
    c.replay_mode = request.param
    yield c
    c.close()


def _expected_kind(client: Any) -> str:
    return COMMAND_BUFFER if client.replay_mode.startswith("command-buffer") else PREBOUND


def test_pocl_replays_through_the_command_buffer() -> None:
    c = make_client(opencl={"command_buffers": True})
    try:
        if _api(c) is None:
            pytest.skip(f"{c.server.ctx.name} has no usable cl_khr_command_buffer")
        x = c.create(np.zeros(64, np.int32))
        with c.capture() as graph:
            c.launch(ADD_ONE, 1, [x], [64])
        assert graph.replayed_by == COMMAND_BUFFER
        assert COMMAND_BUFFER in repr(graph)
    finally:
        c.close()


def test_replays_equal_numpy(client: Any) -> None:
    # Per-launch scalars and views (sub-buffers at offsets), copies and fills between launches: a
    # command records the arguments set when it is recorded, a pre-bound kernel keeps its own.
    c = client
    n = 1024  # the view at n elements starts at an aligned offset
    rng = np.random.default_rng(7)
    x0 = rng.standard_normal(n).astype(np.float32)
    x = c.create(x0)
    y = c.create(np.zeros(2 * n, np.float32))
    z = c.create(np.zeros(n, np.float32))
    upper = y.offset_start(4 * n)  # a view: bound as a sub-buffer
    coefficients = [0.5, -2.0, 3.25, 0.0]
    with c.capture() as graph:
        for a in coefficients:
            c.launch(AXPY, 8, [x, upper], [a, n])
        c.copy(upper, z)
        c.launch_unchecked(AXPY, 8, [upper, z], [np.float32(1.5), n])
        c.fill(y.offset_end(4 * n), 2.0, "f32")
        c.launch(FILL, 4, [x.offset_start(4 * 256)], [-1.0, 100])
    assert graph.replayed_by == _expected_kind(c)
    m_x, m_y, m_z = x0.copy(), np.zeros(2 * n, np.float32), np.zeros(n, np.float32)

    def model() -> None:
        for a in coefficients:
            m_y[n:] += np.float32(a) * m_x
        m_z[:] = m_y[n:]
        m_z[:] += np.float32(1.5) * m_y[n:]
        m_y[:n] = 2.0
        m_x[256:356] = -1.0

    for times in (1, 3):
        graph.replay(times)
        for _ in range(times):
            model()
        np.testing.assert_allclose(c.to_numpy(x, "f32"), m_x, rtol=1e-5)
        np.testing.assert_allclose(c.to_numpy(y, "f32"), m_y, rtol=1e-5, atol=1e-4)
        np.testing.assert_allclose(c.to_numpy(z, "f32"), m_z, rtol=1e-5, atol=1e-4)
    graph.replay(0)  # nothing
    np.testing.assert_allclose(c.to_numpy(x, "f32"), m_x, rtol=1e-5)
    graph.close()


def test_many_replays_in_one_call(client: Any) -> None:
    # Enqueued again while the previous enqueue is pending: simultaneous use, or the ring's copies.
    c = client
    n = 256
    x = c.create(np.zeros(n, np.int32))
    with c.capture() as graph:
        for _ in range(10):
            c.launch(ADD_ONE, 4, [x], [n])
    graph.replay(50)
    graph.replay()
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 510))
    native = graph._native
    if isinstance(native, replay.CommandBufferReplay):
        (qb,) = native._queues.values()
        assert len(qb.buffers) <= (1 if _api(c).simultaneous else replay.RING)  # type: ignore[union-attr]
    graph.close()


def test_interleaved_with_eager_launches_on_two_streams(client: Any) -> None:
    # Each thread has its stream: replays and eager launches of both, on shared and own memory,
    # are ordered as launches are (the replay waits for the other stream's writes to its buffers).
    c = client
    n = 128
    shared = c.create(np.zeros(n, np.int32))
    own = [c.create(np.zeros(n, np.int32)) for _ in range(2)]
    with c.capture() as graph:
        c.launch(ADD_ONE, 2, [shared], [n])
        c.copy(shared, own[0])
    errors: list[BaseException] = []
    barrier = threading.Barrier(2)

    replayed_on: list[int] = []  # the stream thread 0 replays on

    def worker(k: int) -> None:
        try:
            if k == 0:
                replayed_on.append(c.stream_id())
            barrier.wait(30)
            for _ in range(20):
                if k == 0:
                    graph.replay()  # writes shared, then copies it
                else:
                    c.launch(ADD_ONE, 2, [own[1]], [n])
                    c.launch(ADD_ONE, 2, [shared], [n])  # shared again, from the other stream
            c.sync()
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors
    np.testing.assert_array_equal(c.to_numpy(shared, "i32"), np.full(n, 40))
    np.testing.assert_array_equal(c.to_numpy(own[1], "i32"), np.full(n, 20))
    copied = c.to_numpy(own[0], "i32")
    assert copied.min() == copied.max() and 20 <= copied[0] <= 40  # a whole state of shared
    # Then on this thread's stream, after both: a replay reads what the others wrote.
    graph.replay()
    np.testing.assert_array_equal(c.to_numpy(own[0], "i32"), np.full(n, 41))
    if isinstance(graph._native, replay.CommandBufferReplay):
        # One command buffer per queue it ran on: thread 0's and this thread's, one when both
        # streams have the same queue (stream slots are the stream id modulo max_streams).
        slots = {sid % c.server.multistream.max_streams for sid in (replayed_on[0], c.stream_id())}
        assert len(graph._native._queues) == len(slots)
    graph.close()


def test_dynamic_counts_and_odd_fills_replay_recorded(client: Any) -> None:
    c = client
    x = c.create(np.zeros(64, np.int32))
    counts = c.create(np.array([1, 1, 1], np.uint32))
    with c.capture() as graph:
        c.launch(ADD_ONE, CubeCount.dynamic(counts), [x], [64])
    assert graph.replayed_by == "recorded"
    graph.replay(2)
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(64, 2))
    with c.capture() as odd:  # a 2-byte pattern at an odd offset: the host fills it
        c.fill(x.offset_start(1).offset_end(1), 0x0102, "u16")
    assert odd.replayed_by == "recorded"
    with c.capture() as empty:  # an empty count runs nothing: nothing native either
        c.launch(ADD_ONE, 0, [x], [64])
    assert empty.replayed_by == "recorded"
    for g in (graph, odd, empty):
        g.close()


def test_bad_unchecked_scalars_raise_at_the_replay(client: Any) -> None:
    c = client
    x = c.create(np.zeros(64, np.int32))
    with c.capture() as graph:
        c.launch_unchecked(ADD_ONE, 1, [x], ["sixty-four"])
    assert graph.replayed_by == "recorded"  # they do not set: the launch path raises, as eagerly
    with pytest.raises(ValidationError):
        graph.replay()
    graph.close()


def test_closing_the_graph_releases_the_replay(client: Any) -> None:
    c = client
    shift = max(256, c.capabilities.offset_alignment)  # a view the device can bind (NVIDIA: 512 B)
    x = c.create(np.zeros(64 + shift // 4, np.int32))
    with c.capture() as graph:
        c.launch(ADD_ONE, 1, [x], [64])
        c.launch(ADD_ONE, 1, [x.offset_start(shift)], [0])
    native = graph._native
    assert native is not None and native in c.server._natives.replays
    graph.replay()
    graph.close()
    assert native._closed and native._ops == [] and not native._clones
    if isinstance(native, replay.CommandBufferReplay):
        assert not native._queues  # command buffers and events released
    np.testing.assert_array_equal(c.to_numpy(x, "i32")[:64], np.ones(64))
    np.testing.assert_array_equal(c.to_numpy(x, "i32")[64:], np.zeros(shift // 4))


def test_closing_the_client_releases_open_graphs(client: Any) -> None:
    c = make_client(opencl=MODES[client.replay_mode][0])
    x = c.create(np.zeros(1 << 12, np.int32))
    graphs = []
    for k in range(3):
        with c.capture() as g:
            c.launch(ADD_ONE, 16, [x.offset_start(4096 * k)], [1024])
            c.fill(x.offset_end(4096 * 3), k, "i32")
        g.replay(2)
        graphs.append(g)
    natives = [g._native for g in graphs]
    c.close()
    assert all(n._closed for n in natives)  # released by the server's release, before its pages
    with pytest.raises(ValidationError, match="closed"):
        graphs[0].replay()
    del c, natives
    assert _opencl_garbage() == []


@pytest.mark.parametrize("native", [True, False], ids=["c", "python"])
def test_batch_steps_and_driver_errors(native: bool) -> None:
    # The C loop and its Python twin: launches and callables in order, ``times`` over; a driver
    # error names the step and the code (the replay turns it into a LaunchError).
    import pyopencl as cl

    module = launch_path.load()
    if native and module is None:
        pytest.skip(f"the C launcher is not in use: {launch_path.status()}")
    batch_type = module.Batch if native else replay.PythonBatch
    c = make_client(opencl={"command_buffers": False, "native_launch": native})
    try:
        server = c.server
        x = c.create(np.zeros(64, np.int32))
        compiled = server.compile_kernel(ADD_ONE, ExecutionMode.CHECKED)
        clone = clone_program(compiled.program, ADD_ONE)
        replay.bind(clone, replay._Launch(compiled, (server.bound_buffer(x),), (64,), (64, 1, 1)))
        c.sync()
        queue = server.multistream.streams.get(0).stream
        seen: list[Any] = []
        batch_type([(clone.kernel, (64, 1, 1), (64, 1, 1)), seen.append]).run(queue, 3)
        queue.finish()
        assert seen == [queue] * 3
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(64, 3))
        too_wide = batch_type([seen.append, (clone.kernel, (1 << 20, 1, 1), (1 << 20, 1, 1))])
        with pytest.raises(RuntimeError) as info:
            too_wide.run(queue, 1)
        call, index, code = info.value.args
        assert (call, index) == ("clEnqueueNDRangeKernel", 1)
        assert code in {cl.status_code.INVALID_WORK_GROUP_SIZE, cl.status_code.INVALID_WORK_ITEM_SIZE}
        with c.capture() as graph:  # a replay says which launch failed, and why
            c.fill(x, 0, "i32")
            c.launch(ADD_ONE, 1, [x], [64])
        assert isinstance(graph._native, replay.PreboundReplay)
        graph._native._batch = too_wide
        with pytest.raises(LaunchError, match="add_one.*INVALID_WORK"):
            graph.replay()
        graph.close()
    finally:
        c.close()
