"""The template backend through cubeplug: discovery, selection, memory, kernels, errors."""

from __future__ import annotations

import numpy as np
import pytest

import cubeplug
from cubeplug.registry.plugins import registry

KERNEL = cubeplug.Kernel(
    "axpy",
    [cubeplug.Buffer("x", "f32", "read"), cubeplug.Buffer("y", "f32"), cubeplug.Scalar("a", "f32")],
    cube_dim=(64, 1, 1),
    sources={"python": "def axpy(launch, x, y, a):\n    y[:] = a * x + y\n"},
)


@pytest.fixture(scope="module")
def client():  # type: ignore[no-untyped-def]
    if "template" not in registry().names():  # not pip-installed: register the plugin in process
        import cubeplug_template.plugin

        cubeplug.register_backend(cubeplug_template.plugin)
    return cubeplug.client("template")


def test_selected_by_name_and_never_by_auto(client) -> None:  # type: ignore[no-untyped-def]
    assert client.backend == "template" and cubeplug.client("template:0") is client
    assert registry().probe("template").ok
    from cubeplug.registry.selection import select

    assert select("auto").backend != "template"


def test_round_trip_offsets_and_copies(client) -> None:  # type: ignore[no-untyped-def]
    h = client.create(bytes(range(16)))
    assert bytes(client.read_one(h)) == bytes(range(16))
    assert bytes(client.read_one(h.offset_start(4).offset_end(4))) == bytes(range(4, 12))
    other = cubeplug.client("cpu")
    moved = client.to_client(h, other)
    assert bytes(other.read_one(moved)) == bytes(range(16))


def test_kernel_launch(client) -> None:  # type: ignore[no-untyped-def]
    x = client.create(np.arange(8, dtype=np.float32))
    y = client.create(np.ones(8, dtype=np.float32))
    client.launch(KERNEL, cubeplug.CubeCount(1), buffers=[x, y], scalars=[2.0])
    assert np.array_equal(client.to_numpy(y, np.float32), 2 * np.arange(8, dtype=np.float32) + 1)


def test_memory_is_reused(client) -> None:  # type: ignore[no-untyped-def]
    client.memory_cleanup()
    h = client.empty(1000)
    assert client.memory_usage().bytes_in_use >= 1000
    del h
    client.memory_cleanup()
    assert client.memory_usage().bytes_in_use == 0


def test_errors(client) -> None:  # type: ignore[no-untyped-def]
    with pytest.raises(cubeplug.BackendUnavailableError, match="template:1 does not exist"):
        cubeplug.client("template:1")
    bad = cubeplug.Kernel("bad", [cubeplug.Buffer("x", "f32")], sources={"python": "def bad(launch, x:\n"})
    with pytest.raises(cubeplug.CompileError) as info:
        client.launch(bad, cubeplug.CubeCount(1), buffers=[client.empty(4)])
    assert info.value.line == 1
    boom = cubeplug.Kernel(
        "boom",
        [cubeplug.Buffer("x", "f32")],
        sources={"python": "def boom(launch, x):\n    raise ValueError('no')\n"},
    )
    client.launch(boom, cubeplug.CubeCount(1), buffers=[client.empty(4)])
    with pytest.raises(cubeplug.LaunchError, match="ValueError"):
        client.sync()
