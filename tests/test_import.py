"""`import cubeplug` stays cheap: no GPU library, no backend module."""

from __future__ import annotations

import json
import subprocess
import sys

GPU_MODULES = ("cupy", "pyopencl", "wgpu")


def test_import_cubeplug_imports_no_gpu_library_and_no_backend() -> None:
    code = (
        "import sys, json, cubeplug; "
        "k = cubeplug.Kernel('k', [cubeplug.Buffer('x', 'f32')], {'c': ''}); "
        "print(json.dumps(sorted(m for m in sys.modules if m.split('.')[0] in "
        f"{GPU_MODULES!r} or m.startswith('cubeplug.backends.') or m == 'pluggy')))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert json.loads(out.stdout) == []


def test_public_names() -> None:
    import cubeplug

    for name in cubeplug.__all__:
        assert getattr(cubeplug, name) is not None, name
