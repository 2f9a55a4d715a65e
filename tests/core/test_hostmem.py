"""Host result buffers (cubeplug/core/hostmem.py): no zero-fill, exact copies, huge-page advice."""

from __future__ import annotations

import numpy as np
import pytest

from cubeplug.core import hostmem


@pytest.mark.parametrize("n", [0, 1, 4097, hostmem.HUGEPAGE_MIN + 3])
def test_host_buffer_is_a_writable_bytearray_of_the_size(n: int) -> None:
    buf = hostmem.host_buffer(n)
    assert type(buf) is bytearray and len(buf) == n
    np.frombuffer(buf, dtype=np.uint8)[:] = 7  # writable, and a numpy view needs no copy
    assert buf.count(7) == n


@pytest.mark.parametrize("n", [0, 5, hostmem.HUGEPAGE_MIN + 11])
def test_host_copy_is_exact(n: int) -> None:
    src = np.random.default_rng(n).integers(0, 256, n, dtype=np.uint8)
    out = hostmem.host_copy(src)
    assert type(out) is bytearray and bytes(out) == src.tobytes()


def test_host_copies_split_a_block_end_to_end() -> None:
    src = np.arange(20, dtype=np.uint8)
    outs = hostmem.host_copies(src, [3, 0, 10, 7])
    assert [bytes(o) for o in outs] == [src[:3].tobytes(), b"", src[3:13].tobytes(), src[13:].tobytes()]
    assert all(type(o) is bytearray for o in outs)


def test_only_large_buffers_are_advised(monkeypatch: pytest.MonkeyPatch) -> None:
    advised: list[int] = []
    monkeypatch.setattr(hostmem, "_madvise_fn", lambda a, n, advice: advised.append(n) or 0)
    hostmem.host_buffer(hostmem.HUGEPAGE_MIN - 1)
    assert advised == []
    hostmem.host_buffer(hostmem.HUGEPAGE_MIN + 8192)
    assert len(advised) == 1 and 0 < advised[0] <= hostmem.HUGEPAGE_MIN + 8192
