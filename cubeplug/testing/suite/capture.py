"""Graph capture and replay (``client.capture()``, core/graph.py): equal to eager execution,
ordered with the work around it, the memory kept, and each misuse a CaptureError."""

from __future__ import annotations

import threading
from typing import Any

import numpy as np
import pytest

from cubeplug.core.errors import CaptureError, ValidationError
from cubeplug.core.kernel import CubeCount
from cubeplug.testing import gates, kernels


class TestCapture:
    """Capture records without running; replays run the recorded work, in order, as often as asked."""

    def test_replay_equals_eager_execution(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 100
        x = c.create(np.zeros(n, np.int32))
        y = c.create(np.zeros(n, np.int32))
        with c.capture() as graph:
            for _ in range(3):
                c.launch(k, kernels.cubes(n), [x], [n])
            c.copy(x, y)
            c.launch_unchecked(k, kernels.cubes(n), [y], [n])
            c.fill(x.offset_end(4 * (n - 10)), 7, "i32")
        assert len(graph) == 6
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.zeros(n))  # nothing ran yet
        model_x, model_y = np.zeros(n, np.int32), np.zeros(n, np.int32)
        for times in (1, 2):
            graph.replay(times)
            for _ in range(times):
                model_x += 3
                model_y[:] = model_x + 1
                model_x[:10] = 7
            np.testing.assert_array_equal(c.to_numpy(x, "i32"), model_x)
            np.testing.assert_array_equal(c.to_numpy(y, "i32"), model_y)

    def test_replay_is_ordered_with_the_work_around_it(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        x = c.create(np.zeros(n, np.int32))
        with c.capture() as graph:
            c.launch(k, kernels.cubes(n), [x], [n])
        c.fill(x, 40, "i32")
        graph.replay()
        c.launch(k, kernels.cubes(n), [x], [n])
        graph.replay()
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 43))

    def test_the_graph_keeps_its_memory(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        x = c.create(np.zeros(n, np.int32))
        with c.capture() as graph:
            scratch = c.create(np.full(n, 5, np.int32))  # allocated inside the block: at once
            c.launch(k, kernels.cubes(n), [scratch], [n])
            c.copy(scratch, x)
        del scratch  # only the graph holds it now
        graph.replay(2)
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 7))
        graph.close()
        with pytest.raises(CaptureError, match="closed"):
            graph.replay()

    def test_other_threads_run_while_one_captures(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        mine, theirs = c.create(np.zeros(n, np.int32)), c.create(np.zeros(n, np.int32))
        results: list[Any] = []

        def other() -> None:
            c.launch(k, kernels.cubes(n), [theirs], [n])
            results.append(c.to_numpy(theirs, "i32"))

        with c.capture() as graph:
            c.launch(k, kernels.cubes(n), [mine], [n])
            worker = threading.Thread(target=other)
            worker.start()
            worker.join(60)
        np.testing.assert_array_equal(results[0], np.ones(n))  # ran at once: not captured
        np.testing.assert_array_equal(c.to_numpy(mine, "i32"), np.zeros(n))
        graph.replay()
        np.testing.assert_array_equal(c.to_numpy(mine, "i32"), np.ones(n))

    def test_misuses_are_capture_errors_and_the_client_goes_on(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        x = c.create(np.zeros(n, np.int32))
        with c.capture() as graph:
            with pytest.raises(CaptureError, match="already capturing"), c.capture():
                pass
            with pytest.raises(CaptureError, match="read"):
                c.to_numpy(x, "i32")
            with pytest.raises(CaptureError, match="sync"):
                c.sync()
            with pytest.raises(ValidationError, match="buffers"):  # checked when recorded
                c.launch(k, kernels.cubes(n), [], [n])
            with pytest.raises(CaptureError, match="ended"):
                graph.replay()
            c.launch(k, kernels.cubes(n), [x], [n])
        assert len(graph) == 1
        graph.replay()
        c.launch(k, kernels.cubes(n), [x], [n])
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.full(n, 2))

    def test_replay_after_the_client_closed(self, cubeplug_new_client: Any) -> None:
        c = cubeplug_new_client()
        k = gates.kernel(c, kernels.ADD_ONE)
        x = c.create(np.zeros(64, np.int32))
        with c.capture() as graph:
            c.launch(k, kernels.cubes(64), [x], [64])
        c.close()
        with pytest.raises(ValidationError, match="closed"):
            graph.replay()

    def test_the_graph_keeps_memory_its_user_dropped(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 48
        x = c.create(np.full(n, 10, np.int32))
        y = c.create(np.zeros(n, np.int32))
        dynamic = c.capabilities.has("dynamic_count")
        count = c.create(np.array([kernels.cubes(n), 1, 1], np.uint32))
        with c.capture() as graph:
            c.launch(k, CubeCount.dynamic(count) if dynamic else kernels.cubes(n), [x], [n])
            c.copy(x, y)
        x.drop()  # the user's handles only: the graph holds the memory through its own
        count.drop()
        decoys = [c.create(np.full(n, -1, np.int32)) for _ in range(4)]  # would take freed memory
        graph.replay(3)
        np.testing.assert_array_equal(c.to_numpy(y, "i32"), np.full(n, 13))
        for d in decoys:
            np.testing.assert_array_equal(c.to_numpy(d, "i32"), np.full(n, -1))

    def test_a_dropped_handle_is_refused_when_recorded(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        x = c.create(np.zeros(16, np.int32))
        y = c.create(np.zeros(16, np.int32))
        x.drop()
        with c.capture() as graph:
            with pytest.raises(ValidationError):
                c.launch_unchecked(k, kernels.cubes(16), [x], [16])
            with pytest.raises(ValidationError):
                c.copy(x, y)
        assert len(graph) == 0
        graph.replay()  # an empty graph replays nothing

    def test_a_replay_inside_a_capture_is_recorded(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 32
        x = c.create(np.zeros(n, np.int32))
        with c.capture() as inner:
            c.launch(k, kernels.cubes(n), [x], [n])
            c.launch(k, kernels.cubes(n), [x], [n])
        with c.capture() as outer:
            inner.replay(2)  # recorded into outer: nothing runs now
            c.fill(x.offset_end(4 * (n - 1)), 100, "i32")
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), np.zeros(n))
        assert len(outer) == 5
        outer.replay(2)
        expected = np.full(n, 8)
        expected[0] = 100
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), expected)
        assert isinstance(outer.replayed_by, str) and outer.replayed_by in repr(outer)

    def test_replays_from_two_threads_are_each_ordered(self, cubeplug_fresh_client: Any) -> None:
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 64
        bufs = [c.create(np.zeros(n, np.int32)) for _ in range(2)]
        graphs = []
        for b in bufs:
            with c.capture() as g:
                for _ in range(5):
                    c.launch(k, kernels.cubes(n), [b], [n])
            graphs.append(g)
        errors: list[BaseException] = []

        def run(g: Any) -> None:
            try:
                for _ in range(4):
                    g.replay()
                c.sync()
            except BaseException as e:  # reported below
                errors.append(e)

        workers = [threading.Thread(target=run, args=(g,)) for g in graphs]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
        assert not errors
        for b in bufs:
            np.testing.assert_array_equal(c.to_numpy(b, "i32"), np.full(n, 20))

    def test_every_kind_of_step_replays(self, cubeplug_fresh_client: Any) -> None:
        """Steps a native replay may not hold (a count read from the device, a fill of a pattern
        that is not one repeated byte, a copy within one allocation, views at offsets) replay
        exactly as the eager calls run, whichever way the backend replays them."""
        c = cubeplug_fresh_client
        k = gates.kernel(c, kernels.ADD_ONE)
        n = 96
        x = c.create(np.zeros(n, np.int32))
        count = c.create(np.array([kernels.cubes(n), 1, 1], np.uint32))
        pair = c.create(np.zeros(2 * n, np.int32))
        lo, hi = pair.offset_end(4 * n), pair.offset_start(4 * n)
        # A count read from the device where the backend has it (each replay reads it again).
        dynamic = CubeCount.dynamic(count) if c.capabilities.has("dynamic_count") else kernels.cubes(n)
        with c.capture() as graph:
            c.launch(k, dynamic, [x], [n])
            c.fill(lo, 7, "i32")  # bytes 07 00 00 00: no one-byte memset
            c.fill(hi.offset_start(16), 0, "i32")
            c.launch(k, kernels.cubes(n), [lo], [n])
            c.copy(lo, hi)  # within one allocation
            c.fill(x.offset_start(4 * (n - 4)), -1, "i32")  # 0xff bytes, at an offset
        for times in (1, 3):
            graph.replay(times)
        model_x = np.zeros(n, np.int32)
        model_pair = np.zeros(2 * n, np.int32)
        for _ in range(4):
            model_x += 1
            model_pair[:n] = 8
            model_pair[n + 4 :] = 0
            model_pair[n:] = model_pair[:n]
            model_x[n - 4 :] = -1
        np.testing.assert_array_equal(c.to_numpy(x, "i32"), model_x)
        np.testing.assert_array_equal(c.to_numpy(pair, "i32"), model_pair)
