"""Kernels type-check under ``mypy --strict`` (the public names have typing-friendly declarations in
``cubeplug/lang/typed.py``), and type errors in the host code around them are still reported."""

from __future__ import annotations

import gc
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("mypy")

HERE = Path(__file__).parent


@pytest.fixture(scope="module")
def cache(tmp_path_factory: pytest.TempPathFactory) -> str:
    return str(tmp_path_factory.mktemp("mypy_cache"))


def mypy(path: Path, cache: str) -> tuple[str, int]:
    """mypy's output and exit status on ``path``, from a process of its own. In this one (``mypy.api``)
    a build changed the rest of the test session: it sets the garbage collector's thresholds
    ((700, 10, 10) -> (200000, 30, 30)) and the recursion limit for itself, for good, and keeps its
    last build (0.8M objects) alive until the next, so every full collection of a later test walked
    them (the stateful client model's 126: 23 s). A process costs 0.3 s more a warm run here."""
    done = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--no-error-summary",
         "--cache-dir", cache, "--show-error-codes", str(path)],
        capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    return done.stdout + done.stderr, done.returncode


def test_kernels_type_check_strict(cache: str) -> None:
    saved = gc.get_threshold(), sys.getrecursionlimit()
    gc.set_threshold(701, 11, 12)  # values of our own: those a build sets differ from any default
    sys.setrecursionlimit(saved[1] + 1)
    try:
        out, status = mypy(HERE / "typed_kernels.py", cache)
        # ...and this process is left as it was (mypy in it set both, see mypy()).
        assert (gc.get_threshold(), sys.getrecursionlimit()) == ((701, 11, 12), saved[1] + 1)
    finally:
        gc.set_threshold(*saved[0])
        sys.setrecursionlimit(saved[1])
    assert status == 0, out


def test_host_type_errors_are_reported(cache: str, tmp_path: Path) -> None:
    bad = tmp_path / "bad_host.py"
    bad.write_text(textwrap.dedent("""
        import cubeplug
        from cubeplug import lang as cl
        from cubeplug.lang import Array, f32

        @cl.kernel
        def axpy(x: Array[f32], y: Array[f32], a: f32) -> None:
            i = cl.ABSOLUTE_POS
            if i < len(y):
                y[i] += a * x[i]

        @cl.kernel
        def bad_store(y: Array[f32]) -> None:
            y[cl.ABSOLUTE_POS] = "text"

        def host(client: cubeplug.ComputeClient) -> int:
            axpy.launch(client)
            return axpy.source(client)
    """))
    out, status = mypy(bad, cache)
    assert status == 1
    errors = [line for line in out.splitlines() if ": error:" in line]
    assert len(errors) == 3, out
    assert 'expression has type "str", target has type "float"' in errors[0]
    assert 'Missing positional arguments "count", "cube_dim"' in errors[1]
    assert 'Incompatible return value type (got "str", expected "int")' in errors[2]


def test_typed_kernels_run(cpu: object) -> None:
    from tests.lang import typed_kernels

    got = typed_kernels.run(cpu)  # type: ignore[arg-type]
    x = np.linspace(-1, 2, 64, dtype=np.float32)
    np.testing.assert_allclose(got["y"], 2 * x)
    np.testing.assert_allclose(got["sums"], [(x[:32] ** 2).sum(), (x[32:] ** 2).sum()], rtol=1e-5)
    np.testing.assert_array_equal(got["bins"], [16, 16, 16, 16, 15])
    np.testing.assert_array_equal(got["total"], [np.arange(64).sum()])
    np.testing.assert_array_equal(got["dst"], np.arange(12, dtype=np.float32).reshape(3, 4).T.ravel())
    v = np.arange(16, dtype=np.float32).reshape(4, 4)
    w = np.stack([v[:, 0], v[:, 1], v[:, 2], np.ones(4, np.float32)], axis=1) * 2 + v
    w[:, 3] = v[:, 0] + v[:, 3]
    np.testing.assert_allclose(got["vy"].reshape(4, 4), -w / 2)
    np.testing.assert_array_equal(got["vn"].reshape(4, 2)[:, 0], np.arange(4) + 1)
