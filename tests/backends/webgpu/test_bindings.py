"""Bind groups on a real WebGPU adapter: read buffers bound read-only where their pages allow it."""

from __future__ import annotations

import numpy as np
import pytest

from cubeplug import CubeCount, ExecutionMode, ValidationError
from cubeplug.backends.webgpu.bindings import read_only_allowed
from cubeplug.backends.webgpu.storage import MAX_SLICE_SIZE
from tests.backends.webgpu.conftest import make_client, requires_webgpu
from tests.backends.webgpu.kernels import AXMY, AXPY, XPY


def test_read_only_allowed_where_no_read_page_is_written() -> None:
    a, b, c = object(), object(), object()
    assert read_only_allowed((True, False), (a, b))
    assert read_only_allowed((True, True, False), (a, a, b))  # one page read twice
    assert not read_only_allowed((True, False), (a, a))  # one page read and written
    assert not read_only_allowed((True, True, False), (a, b, b))
    assert read_only_allowed((False, False), (a, a))  # nothing to bind read-only: no conflict
    assert not read_only_allowed((False, True, False, True), (a, b, c, c))


# Above MAX_SLICE_SIZE: each handle in a page of its own.
BIG = MAX_SLICE_SIZE // 4 + 1024


def _big(client, value: float):  # type: ignore[no-untyped-def]
    return client.create(np.full(BIG, value, np.float32))


@requires_webgpu
@pytest.mark.parametrize("mode", [ExecutionMode.CHECKED, ExecutionMode.UNCHECKED])
def test_read_buffers_in_pages_of_their_own_are_bound_read_only(mode) -> None:  # type: ignore[no-untyped-def]
    client = make_client()  # its own compile cache: no read-only pipeline built yet
    try:
        x, y = _big(client, 2.0), _big(client, 1.0)
        assert x.memory().storage.id != y.memory().storage.id
        server = client.server
        axpy, axmy = server.compile_kernel(AXPY, mode), server.compile_kernel(AXMY, mode)
        assert server.binds_read_only(axpy, [x, y])
        assert axpy.program.read_only_pipeline is None  # asking builds nothing
        count = CubeCount(-(-BIG // 128))
        launch = client.launch if mode is ExecutionMode.CHECKED else client.launch_unchecked
        launch(AXPY, count, [x, y], [3.0, BIG])
        np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(BIG, 7, np.float32))
        assert axpy.program.read_only_pipeline is not None  # the launch built and used it
        # A kernel of the same bindings finds AXPY's read-only bind group cached, and builds its
        # own read-only pipeline at its launch.
        launch(AXMY, count, [x, y], [1.0, BIG])
        np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(BIG, 5, np.float32))
        assert axmy.program.read_only_pipeline is not None
        # The same layout with x written: never read-only, and not handed AXPY's bind group.
        assert not server.binds_read_only(server.compile_kernel(XPY, mode), [x, y])
        launch(XPY, count, [x, y], [4.0, BIG])
        np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(BIG, 7, np.float32))
        np.testing.assert_array_equal(client.to_numpy(x, "f32"), np.full(BIG, 4, np.float32))
        launch(AXPY, count, [x, y], [0.5, BIG])
        np.testing.assert_array_equal(client.to_numpy(y, "f32"), np.full(BIG, 9, np.float32))
    finally:
        client.close()


@requires_webgpu
def test_a_page_bound_read_and_written_is_bound_read_write(client) -> None:  # type: ignore[no-untyped-def]
    server = client.server
    axpy = server.compile_kernel(AXPY, ExecutionMode.CHECKED)
    # Small handles share a page; one big handle passed as both x and y; empty ones share the
    # server's own buffer: each launch binds x read-write, as WebGPU refuses both in one dispatch.
    small_x, small_y = client.create(np.full(64, 2, np.float32)), client.create(np.ones(64, np.float32))
    assert not server.binds_read_only(axpy, [small_x, small_y])
    x = _big(client, 2.0)
    assert not server.binds_read_only(axpy, [x, x])
    client.launch(AXPY, CubeCount(-(-BIG // 128)), [x, x], [3.0, BIG])
    np.testing.assert_array_equal(client.to_numpy(x, "f32"), np.full(BIG, 8, np.float32))
    e1, e2 = client.empty(0), client.empty(0)
    assert not server.binds_read_only(axpy, [e1, e2])
    client.launch(AXPY, 1, [e1, e2], [3.0, 0])
    client.sync()
    # An empty read buffer beside a big written one: read-only.
    assert server.binds_read_only(axpy, [e1, x])
    with pytest.raises(ValidationError, match="takes 2 buffers, got 1"):
        server.binds_read_only(axpy, [x])
