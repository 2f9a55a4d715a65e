"""The README's example and ``examples/demo.py`` run, unchanged, on every backend available here.

The example's code is read from README.md (the first ``python`` block of "A short example"), so the
README cannot drift from what works. Each run is a child process running it from a file: the example calls
``cubeplug.client()``, which ``CUBEPLUG_BACKEND`` points at the backend under test (unset: auto).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.std.conftest import skip_reason

ROOT = Path(__file__).resolve().parents[1]

BACKENDS = (
    pytest.param(None, id="auto"),
    pytest.param("cpu"),
    pytest.param("opencl"),
    pytest.param("webgpu"),
    pytest.param("cuda", marks=pytest.mark.gpu),
)


def readme_example() -> str:
    """The code of the first ``python`` block of the README's "A short example" section."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    section = re.search(r"^## A short example\n(.*?)(?=^## )", text, re.M | re.S)
    assert section is not None, "README.md has no '## A short example' section"
    block = re.search(r"^```python\n(.*?)^```", section.group(1), re.M | re.S)
    assert block is not None, "the README's example section has no python block"
    return block.group(1)


def _run(args: list[str], backend: str | None, cwd: Path) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ)
    env.pop("CUBEPLUG_BACKEND", None)
    env.pop("CUBEPLUG_DEVICE", None)
    if backend is not None:
        env["CUBEPLUG_BACKEND"] = backend
    env.setdefault("XDG_RUNTIME_DIR", "/tmp")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True,
                          timeout=240)  # fmt: skip


def _available(backend: str | None) -> None:
    reason = None if backend is None else skip_reason(backend)
    if reason is not None:
        pytest.skip(reason)


def test_the_example_is_the_lang_axpy() -> None:
    code = readme_example()
    assert "@cl.kernel" in code and "axpy.launch(client" in code and "cubeplug.client()" in code, code


@pytest.mark.parametrize("backend", BACKENDS)
def test_readme_example_runs(backend: str | None, tmp_path: Path) -> None:
    _available(backend)
    code = readme_example()
    script = tmp_path / "example.py"  # a file: @cl.kernel reads its function's source
    script.write_text(code + "print('backend:', client.backend)\n", encoding="utf-8")
    proc = _run([str(script)], backend, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == "[4. 5. 6. 7.]", proc.stdout  # the value the README's comment states
    assert "# [4. 5. 6. 7.]" in code, "the README's comment no longer states the printed value"
    if backend is not None:
        assert lines[-1] == f"backend: {backend}", proc.stdout
    source = "\n".join(lines[1:-1])
    assert "axpy" in source, proc.stdout  # the generated source (IR text on cpu) names the kernel


@pytest.mark.parametrize("backend", [b for b in BACKENDS if b.values[0] is not None])
def test_demo_runs(backend: str, tmp_path: Path) -> None:
    _available(backend)
    proc = _run([str(ROOT / "examples" / "demo.py"), backend], None, tmp_path)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert f"backend: {backend}" in proc.stdout, proc.stdout
    assert "WRONG" not in proc.stdout and "correct" in proc.stdout, proc.stdout
