"""CUDA fills and device copies use the runtime's own commands: cudaMemsetAsync for a repeated byte,
an uploaded seed doubled by cudaMemcpyAsync for wider patterns, cudaMemcpyAsync for copies.

Each test runs on the fake runtime (any machine) and on the GPU (marker ``gpu``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug.backends.cuda.transfers import FILL_SEED
from cubeplug.core.kernel import DTYPES


@pytest.fixture
def calls(client: Any, monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The server's memset and memcpy calls, by name, the commands still run."""
    server = client.server
    seen: list[str] = []
    memset, memcpy = server._memset, server._memcpy

    def memset_spy(ptr: int, value: int, size: int, stream: int) -> None:
        seen.append(f"memset {value} {size}")
        memset(ptr, value, size, stream)

    def memcpy_spy(dst: int, src: int, size: int, kind: int, stream: int) -> None:
        seen.append(f"memcpy {kind} {size}")
        memcpy(dst, src, size, kind, stream)

    monkeypatch.setattr(server, "_memset", memset_spy)
    monkeypatch.setattr(server, "_memcpy", memcpy_spy)
    return seen


def test_a_repeated_byte_is_one_memset(client: Any, calls: list[str]) -> None:
    h = client.create(np.arange(1000, dtype=np.int32))
    calls.clear()
    client.fill(h.offset_start(4).offset_end(12), 0, "f64")
    client.fill(h.offset_start(1).offset_end(3), 0xAB, "u8")
    client.fill(h.offset_end(8), -1, "i64")
    assert calls == ["memset 0 3984", "memset 171 3996", "memset 255 3992"]
    got = client.to_numpy(h, "u8")
    original = np.arange(1000, dtype=np.int32).view(np.uint8)
    assert (got[:-8] == 255).all() and (got[-8:-3] == 0xAB).all() and (got[-3:] == original[-3:]).all()


@pytest.mark.parametrize("dtype", ["u16", "u32", "f64"])
def test_a_wider_pattern_is_a_seed_doubled_on_the_device(client: Any, calls: list[str], dtype: str) -> None:
    n = 3 * FILL_SEED + 8 * 5  # not a power of two times the seed: the last copy is partial
    h = client.create(np.zeros(n + 16, np.uint8))
    calls.clear()
    value = {"u16": 0x0102, "u32": 0x01020304, "f64": 1.5}[dtype]
    client.fill(h.offset_start(8).offset_end(8), value, dtype)
    copies = [c for c in calls if c.startswith("memcpy 3 ")]
    assert not [c for c in calls if c.startswith("memset")]
    assert sum(int(c.split()[-1]) for c in copies) == n - FILL_SEED  # the rest is the seed's upload
    assert len(copies) == 2  # 64 KiB -> 128 KiB -> all
    got = client.to_numpy(h, "u8")
    want = np.zeros(n + 16, np.uint8)
    dt = DTYPES[dtype]
    want[8:-8] = np.frombuffer(np.full(n // dt.itemsize, value, dt).tobytes(), np.uint8)
    np.testing.assert_array_equal(got, want)


def test_copy_is_one_device_memcpy(client: Any, calls: list[str]) -> None:
    h = client.create(np.arange(1024, dtype=np.int32))
    calls.clear()
    client.copy(h.offset_end(2048).offset_start(3), h.offset_start(2048 + 3))
    assert calls == ["memcpy 3 2045"]
    got = client.to_numpy(h, "u8")
    np.testing.assert_array_equal(got[2051:], np.arange(1024, dtype=np.int32).view(np.uint8)[3:2048])
