"""The WebGPU replay of a captured graph (backends/webgpu/replay.py): the eager calls' own tasks,
made once, and a whole replay in one command buffer and one submit."""

from __future__ import annotations

from typing import Any

import numpy as np

from cubeplug.core.kernel import CubeCount
from cubeplug.testing import gates, kernels
from tests.backends.webgpu.conftest import requires_webgpu

pytestmark = requires_webgpu


def test_a_replay_is_one_submit(fresh_client: Any) -> None:
    c = fresh_client
    k = gates.kernel(c, kernels.ADD_ONE)
    n = 64
    x = c.create(np.zeros(n, np.int32))
    y = c.create(np.zeros(n, np.int32))
    with c.capture() as graph:
        for _ in range(50):
            c.launch(k, kernels.cubes(n), [x], [n])
        c.copy(x, y)
        c.fill(x, 3, "i32")  # eagerly a host write: a copy from a pattern buffer here
        c.fill(y.offset_start(4 * (n - 2)), 0, "i32")
    assert graph.replayed_by == "webgpu: one submit per replay"
    c.sync()
    queue = c.server.queue
    before = queue.submits
    graph.replay(4)
    c.flush()
    assert queue.submits == before + 1
    model_y = np.full(n, 53, np.int32)
    model_y[-2:] = 0
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 3))
    np.testing.assert_array_equal(c.to_numpy(y, "i32"), model_y)


def test_replays_share_the_submit_of_the_work_around_them(fresh_client: Any) -> None:
    c = fresh_client
    k = gates.kernel(c, kernels.ADD_ONE)
    n = 32
    x = c.create(np.zeros(n, np.int32))
    with c.capture() as graph:
        c.launch(k, kernels.cubes(n), [x], [n])
    c.sync()
    before = c.server.queue.submits
    c.launch(k, kernels.cubes(n), [x], [n])
    graph.replay(2)
    c.launch(k, kernels.cubes(n), [x], [n])
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 4))
    assert c.server.queue.submits == before + 1


def test_a_dynamic_count_replays_through_the_launch_path(fresh_client: Any) -> None:
    c = fresh_client
    k = gates.kernel(c, kernels.ADD_ONE)
    n = 32
    x = c.create(np.zeros(n, np.int32))
    count = c.create(np.array([1, 1, 1], np.uint32))
    with c.capture() as graph:
        c.launch(k, CubeCount.dynamic(count), [x], [n])
    assert graph.replayed_by == "recorded"
    c.write(count, np.array([0, 1, 1], np.uint32))  # read at each launch: this replay runs nothing
    graph.replay()
    c.write(count, np.array([1, 1, 1], np.uint32))
    graph.replay()
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.ones(n))


def test_scalar_blocks_beyond_one_arena_split_the_submit_not_the_results(fresh_client: Any) -> None:
    c = fresh_client
    k = gates.kernel(c, kernels.typed_add("i32"))
    n = 16
    x = c.create(np.zeros(n, np.int32))
    y = c.create(np.zeros(n, np.int32))
    m = 3000  # distinct scalar blocks: more than one 64 KiB arena holds
    with c.capture() as graph:
        for i in range(m):
            c.launch(k, 1, [x, y], [i, n])
    c.sync()
    before = c.server.queue.submits
    graph.replay()
    np.testing.assert_array_equal(c.to_numpy(y, "i32"), np.full(n, m - 1))  # the last one's
    assert c.server.queue.submits > before + 1  # the arena filled up: more segments, in order
