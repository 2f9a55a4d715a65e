"""The CUDA replay of a captured graph (backends/cuda/replay.py): a CUDA graph made by stream
capture, replayed with one cudaGraphLaunch per repetition; on the fake runtime (whose capture
defers what a capturing stream queues) and on the real GPU."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np

from cubeplug.core.kernel import CubeCount
from tests.backends.cuda.kernels import ADD_ONE


def cubes(n: int) -> int:
    return -(-n // ADD_ONE.cube_dim[0])


def test_launches_copies_and_byte_fills_become_a_cuda_graph(client: Any) -> None:
    c = client
    k = ADD_ONE
    n = 1000
    x = c.create(np.zeros(n, np.int32))
    y = c.create(np.zeros(n, np.int32))
    with c.capture() as graph:
        for _ in range(20):
            c.launch(k, cubes(n), [x], [n])
        c.copy(x, y)
        c.launch_unchecked(k, cubes(n), [y], [n])
        c.fill(x.offset_start(4 * (n - 8)), -1, "i32")  # 0xff bytes: one memset
    assert graph.replayed_by == "cuda graph"
    graph.replay(3)
    model_x = np.zeros(n, np.int32)
    model_y = np.zeros(n, np.int32)
    for _ in range(3):
        model_x += 20
        model_y[:] = model_x + 1
        model_x[-8:] = -1
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), model_x)
    np.testing.assert_array_equal(c.to_numpy(y, "i32"), model_y)


def test_what_a_cuda_graph_cannot_hold_replays_through_the_launch_path(client: Any) -> None:
    c = client
    k = ADD_ONE
    n = 64
    x = c.create(np.zeros(n, np.int32))
    count = c.create(np.array([1, 1, 1], np.uint32))
    with c.capture() as dynamic:
        c.launch(k, CubeCount.dynamic(count), [x], [n])
    with c.capture() as patterned:
        c.fill(x, 7, "i32")
    assert dynamic.replayed_by == patterned.replayed_by == "recorded"
    patterned.replay()
    dynamic.replay(2)
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 9))


def test_a_replay_waits_for_another_streams_writes(client: Any) -> None:
    c = client
    k = ADD_ONE
    n = 1 << 20
    x = c.create(np.zeros(n, np.int32))
    with c.capture() as graph:
        c.launch(k, cubes(n), [x], [n])

    def writer() -> None:
        for _ in range(50):  # queued on this thread's own stream
            c.launch(k, cubes(n), [x], [n])

    t = threading.Thread(target=writer)
    t.start()
    t.join()
    graph.replay()  # on the main thread's stream: after the writer's 50 launches
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 51))


def test_closing_the_graph_releases_it_and_queued_replays_finish(client: Any) -> None:
    c = client
    k = ADD_ONE
    n = 256
    x = c.create(np.zeros(n, np.int32))
    with c.capture() as graph:
        for _ in range(10):
            c.launch(k, cubes(n), [x], [n])
    graph.replay(5)
    graph.close()
    np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 50))
