"""CPU fills are numpy fills of the region on the worker (no host pattern written), in stream order."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

from cubeplug.backends.cpu.server import CpuServer
from cubeplug.backends.cpu.storage import CpuStorage
from cubeplug.core.client import ComputeClient


@pytest.fixture
def client() -> Iterator[Any]:
    c = ComputeClient(CpuServer(CpuStorage()))
    yield c
    c.close()


def test_fill_queues_a_numpy_fill_not_a_write(client: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    server = client.server
    ran: list[str] = []
    fill, write = server._run_fill, server._run_write
    monkeypatch.setattr(server, "_run_fill", lambda *a: (ran.append("fill"), fill(*a)))
    monkeypatch.setattr(server, "_run_write", lambda *a: (ran.append("write"), write(*a)))
    h = client.create(np.zeros(100, np.int16))
    client.fill(h.offset_start(2).offset_end(2), 0x0102, "u16")
    client.fill(h.offset_start(1).offset_end(7), 1.5, "f64")  # any byte offset: numpy needs no alignment
    client.fill(h.offset_start(1).offset_end(1), 9, "i16")  # an odd byte offset and a 2-byte pattern
    got = client.to_numpy(h, "u8")
    assert ran == ["fill", "fill", "fill"]
    want = np.zeros(200, np.uint8)
    want[1:-1] = np.frombuffer(np.full(99, 9, np.int16).tobytes(), np.uint8)
    np.testing.assert_array_equal(got, want)
