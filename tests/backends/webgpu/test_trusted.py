"""Unchecked launches build their shaders without wgpu's runtime checks (``trusted.py``)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import CompileError, Kernel
from cubeplug.backends.webgpu import compiler, trusted
from tests.backends.webgpu.conftest import make_client, requires_webgpu
from tests.backends.webgpu.kernels import ADD_ONE, AXPY

pytestmark = requires_webgpu


@pytest.fixture
def client() -> Any:
    c = make_client()
    yield c
    c.close()


def _recording(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    built: list[str] = []
    real = compiler.trusted_module

    def record(device: Any, code: str, label: str = "") -> Any:
        module = real(device, code, label)
        built.append("trusted" if module is not None else "fallback")
        return module

    monkeypatch.setattr(compiler, "trusted_module", record)
    return built


def test_this_wgpu_builds_trusted_modules_and_only_unchecked_launches_use_them(
    client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    built = _recording(monkeypatch)
    x = np.arange(1000, dtype=np.float32)
    hx, hy = client.create(x), client.create(np.ones(1000, np.float32))
    client.launch(AXPY, 8, [hx, hy], [2.0, 1000])
    assert built == []  # checked: wgpu's own checks stay
    client.launch_unchecked(AXPY, 8, [hx, hy], [2.0, 1000])
    assert built == ["trusted"]  # the installed wgpu-py has the binding: the fast path is not dead
    np.testing.assert_array_equal(client.to_numpy(hy, "f32"), 1 + 4 * x)
    client.launch_unchecked(AXPY, 8, [hx, hy], [2.0, 1000])
    assert built == ["trusted"]  # compiled once per kernel and mode


def test_a_wgpu_without_the_binding_builds_the_checked_module(
    fresh_client: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(trusted, "_binding", lambda: None)
    assert trusted.trusted_module(fresh_client.server.gpu, "") is None
    built = _recording(monkeypatch)
    h = fresh_client.create(np.zeros(100, np.int32))
    fresh_client.launch_unchecked(ADD_ONE, 2, [h], [100])
    assert built == ["fallback"]  # the launch went through the fallback, and it runs
    assert (fresh_client.to_numpy(h, "i32") == 1).all()


def test_unchecked_compile_errors_name_the_users_line(client: Any) -> None:
    bad = Kernel(
        "bad",
        ADD_ONE.params,
        {
            "wgsl": "@compute @workgroup_size(CUBE_DIM_X, CUBE_DIM_Y, CUBE_DIM_Z)\n"
            "fn bad(@builtin(global_invocation_id) g: vec3<u32>) {\n  x[g.x] = undefined_name;\n}\n"
        },
        cube_dim=64,
    )
    h = client.create(np.zeros(4, np.int32))
    with pytest.raises(CompileError, match="undefined_name") as info:
        client.launch_unchecked(bad, 1, [h], [4])
    assert info.value.line == 3
    client.launch_unchecked(ADD_ONE, 1, [h], [4])  # the client still works
    assert (client.to_numpy(h, "i32") == 1).all()
