"""How pooled handles are bound to kernels, and the way to give a handle a page of its own.

Issue 19 asked whether kernels on handles inside a pooled page (bound as sub-buffers) run slower
than on separate buffers. ``bench/probes/subbuffer_penalty.py`` measured no difference on PoCL 3.1,
PoCL 5.0 or NVIDIA's driver (docs/memory.md), so the binding stays as it is; these tests pin down
the behaviour the probe and the docs rely on: a handle at a page's start binds the page itself,
any other binds a sub-buffer of its page at the pool's offset, and a handle made in
``client.persistent_memory()`` is alone at the start of a page of its own, so it binds no
sub-buffer at all (the remedy the docs give, should a device ever show a penalty).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import Buffer, CubeCount, Kernel, Scalar
from tests.backends.opencl.conftest import requires_opencl

pytestmark = requires_opencl

N = 64
GEMM = Kernel(
    "gemm",
    [Buffer("a", "f32", "read"), Buffer("b", "f32", "read"), Buffer("c", "f32", "write"), Scalar("n", "u32")],
    {
        "c": """
KERNEL gemm(GLOBAL const float* a, GLOBAL const float* b, GLOBAL float* c, unsigned int n) {
    unsigned int i = ABSOLUTE_POS_Y, j = ABSOLUTE_POS_X;
    if (i >= n || j >= n) return;
    float acc = 0.0f;
    for (unsigned int k = 0; k < n; ++k) acc += a[i * n + k] * b[k * n + j];
    c[i * n + j] = acc;
}
"""
    },
    cube_dim=(16, 16),
)


def _inputs() -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(19)
    return rng.random((N, N), np.float32), rng.random((N, N), np.float32)


def _gemm(client: Any, a: Any, b: Any, c: Any) -> np.ndarray:
    client.launch(GEMM, CubeCount(N // 16, N // 16), [a, b, c], [N])
    return np.asarray(client.to_numpy(c, "f32", (N, N)))


def _region(handle: Any) -> tuple[int, int]:
    """(page id, byte offset in the page) of what a handle binds."""
    storage = handle.memory().storage
    return storage.id, storage.offset + handle.start


def _mem_info(buf: Any, name: str) -> Any:
    import pyopencl as cl

    return buf.get_info(getattr(cl.mem_info, name))


def test_pooled_handles_share_a_page_and_bind_sub_buffers_at_their_offsets(client) -> None:  # type: ignore[no-untyped-def]
    a, b = _inputs()
    handles = [client.create(a), client.create(b), client.empty(a.nbytes)]
    regions = [_region(h) for h in handles]
    assert len({page for page, _ in regions}) == 1  # one page, cut by the sliced pool
    assert sorted(off for _, off in regions)[0] == 0
    page = client.server.storage.page(regions[0][0])
    for h, (_, offset) in zip(handles, regions, strict=True):
        bound = client.server.bound_buffer(h)
        if offset == 0:
            assert bound is page  # a region at the page's start binds the page itself
        else:
            assert bound is not page
            assert _mem_info(bound, "ASSOCIATED_MEMOBJECT") == page
            assert _mem_info(bound, "OFFSET") == offset and bound.size == h.size
    np.testing.assert_allclose(_gemm(client, *handles), a @ b, rtol=1e-4)


def test_persistent_handles_are_alone_in_their_pages_and_bind_no_sub_buffer(client) -> None:  # type: ignore[no-untyped-def]
    a, b = _inputs()
    pooled = [client.create(a), client.create(b), client.empty(a.nbytes)]
    with client.persistent_memory():
        own = [client.create(a), client.create(b), client.empty(a.nbytes)]
    regions = [_region(h) for h in own]
    assert [off for _, off in regions] == [0, 0, 0]
    assert len({page for page, _ in regions}) == 3
    assert not {page for page, _ in regions} & {_region(h)[0] for h in pooled}
    storage = client.server.storage
    for h, (page, _) in zip(own, regions, strict=True):
        assert client.server.bound_buffer(h) is storage.page(page)
    got = _gemm(client, *own)
    assert not any(page in storage._subs for page, _ in regions)  # the launch made no sub-buffer
    # The same kernel on pooled handles gives the same bytes: the binding changes nothing else.
    np.testing.assert_array_equal(got, _gemm(client, *pooled))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4)


@pytest.mark.parametrize("start", [1, 3])
def test_a_view_binds_a_sub_buffer_at_its_offset_in_the_page(client, start) -> None:  # type: ignore[no-untyped-def]
    # A view of a persistent handle is no longer at the page's start: it binds a sub-buffer, at
    # the alignment the device needs, and the kernel sees the view's first byte at index 0.
    align = client.server.storage.alignment
    a, b = _inputs()
    with client.persistent_memory():
        big = client.create(np.concatenate([np.zeros(start * align // 4, np.float32), a.ravel()]))
    view = big.offset_start(start * align)
    page, offset = _region(view)
    assert offset == start * align
    bound = client.server.bound_buffer(view)
    assert _mem_info(bound, "ASSOCIATED_MEMOBJECT") == client.server.storage.page(page)
    assert _mem_info(bound, "OFFSET") == offset
    got = _gemm(client, view, client.create(b), client.empty(a.nbytes))
    np.testing.assert_allclose(got, a @ b, rtol=1e-4)
