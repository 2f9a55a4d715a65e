"""Small python-dialect kernels used by the core tests."""

from __future__ import annotations

import numpy as np

from cubeplug import Buffer, Kernel, Scalar


def _axpy(launch, x, y, a, n):  # type: ignore[no-untyped-def]
    y[:n] += a * x[:n]


def _fill(launch, out, value):  # type: ignore[no-untyped-def]
    out[:] = value


def _add_one(launch, x):  # type: ignore[no-untyped-def]
    x += 1


def _write_count(launch, out):  # type: ignore[no-untyped-def]
    out[:3] = launch.count


def _fail(launch, x):  # type: ignore[no-untyped-def]
    raise RuntimeError("kernel exploded")


def _noop(launch):  # type: ignore[no-untyped-def]
    return None


AXPY = Kernel(
    "axpy",
    [Buffer("x", "f32", "read"), Buffer("y", "f32", "read_write"), Scalar("a", "f32"), Scalar("n", "u32")],
    {"python": _axpy},
    cube_dim=256,
)
FILL = Kernel("fill", [Buffer("out", "f32", "write"), Scalar("value", "f32")], {"python": _fill})
ADD_ONE = Kernel("add_one", [Buffer("x", "i32")], {"python": _add_one})
WRITE_COUNT = Kernel("write_count", [Buffer("out", "u32", "write")], {"python": _write_count})
FAIL = Kernel("fail", [Buffer("x", "f32")], {"python": _fail})
NOOP = Kernel("noop", [], {"python": _noop})
C_ONLY = Kernel("c_only", [Buffer("x", "f32")], {"c": "KERNEL c_only(GLOBAL float* x) {}"})


def f32(*values: float) -> np.ndarray:
    return np.array(values, dtype=np.float32)
