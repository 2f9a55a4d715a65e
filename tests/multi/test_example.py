"""``examples/data_parallel.py`` runs here: several cpu devices, two clients of the OpenCL device, and a
local Ray cluster of two actors; every rank prints numpy's total."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def run(*args: str) -> str:
    env = dict(os.environ, XDG_RUNTIME_DIR="/tmp")
    env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
    proc = subprocess.run([sys.executable, str(ROOT / "examples" / "data_parallel.py"), *args], env=env,
                          capture_output=True, text=True, timeout=240)  # fmt: skip
    assert proc.returncode == 0, proc.stdout + proc.stderr
    line = proc.stdout.strip().splitlines()[-1]
    assert "on every rank: True" in line, line
    return line


def test_cpu_devices() -> None:
    assert "cpu:2" in run("cpu", "--devices", "3", "--n", "100003", "--steps", "2")


def test_opencl_clients() -> None:
    pytest.importorskip("pyopencl")
    assert "opencl:0" in run("opencl", "--devices", "2", "--n", "50001", "--steps", "2")


def test_ray_actors() -> None:
    pytest.importorskip("ray")
    assert "2 Ray actors" in run("cpu", "--ray", "2", "--n", "50001", "--steps", "2")
