"""The check each backend's tests share: a thread waiting in ``sync`` leaves the client to the others."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def assert_sync_does_not_stall(
    client: Any, launch_slow: Callable[[], None], meanwhile: Callable[[], Any]
) -> Any:
    """Run ``launch_slow()`` then ``client.sync()`` in a thread of its own; once that sync waits,
    call ``meanwhile()`` here (calls that need the client's lock, not the device) and assert they
    returned in less than half the sync's time. Returns what ``meanwhile()`` returned."""
    started = threading.Event()

    def launch_and_sync() -> None:  # its own stream: the sync waits for this work
        launch_slow()
        started.set()
        client.sync()

    t0 = time.perf_counter()
    syncing = threading.Thread(target=launch_and_sync)
    syncing.start()
    assert started.wait(30)
    time.sleep(0.02)  # let the sync begin waiting
    result = meanwhile()
    t_other = time.perf_counter()
    syncing.join(60)
    t_sync = time.perf_counter()
    assert not syncing.is_alive()
    assert (t_other - t0) < 0.5 * (t_sync - t0), (t_other - t0, t_sync - t0)
    return result
