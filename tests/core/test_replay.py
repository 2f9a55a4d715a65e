"""The native-replay contract's helpers (core/replay.py)."""

from __future__ import annotations

import numpy as np

from cubeplug.backends.cpu.server import CpuServer
from cubeplug.backends.cpu.storage import CpuStorage
from cubeplug.core.client import ComputeClient
from cubeplug.core.kernel import CubeCount
from cubeplug.core.replay import COPY, LAUNCH, Step, unique_handles


def test_unique_handles_are_one_per_memory_whatever_the_aliases() -> None:
    client = ComputeClient(CpuServer(CpuStorage()))
    try:
        a, b = client.create(np.zeros(16, np.int32)), client.create(np.zeros(16, np.int32))
        count = client.create(np.ones(3, np.uint32))
        steps = [Step(COPY, (a.alias(), b.alias())) for _ in range(100)]
        steps.append(Step(LAUNCH, (a.offset_start(4),), None, CubeCount.dynamic(count.alias())))
        handles = unique_handles(steps)
        assert len(handles) == 3  # a, b and the count: a graph of 1000 steps waits for three
        assert {id(h.token) for h in handles} == {id(a.token), id(b.token), id(count.token)}
    finally:
        client.close()
