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


def two_gpus() -> None:
    """Skip unless two CUDA devices are here (the GPU machine: ``pytest -m gpu tests/multi``)."""
    from tests.backends.cuda.conftest import gpu_skip_reason

    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(reason)
    import cubeplug

    if cubeplug.device_count("cuda") < 2:
        pytest.skip("needs two CUDA devices")


@pytest.mark.gpu
def test_two_gpus_in_one_process() -> None:
    two_gpus()
    assert "cuda:1" in run("cuda", "--devices", "2", "--n", "1000003", "--steps", "3")


@pytest.mark.gpu
def test_two_gpus_on_ray_actors() -> None:
    """One actor per GPU (``num_gpus=1``, a local cluster with ``num_gpus=2``): NCCL across the
    two processes, its unique id handed over by Ray."""
    pytest.importorskip("ray")
    two_gpus()
    assert "2 Ray actors" in run("cuda", "--ray", "2", "--gpus", "1", "--n", "1000003", "--steps", "3")
