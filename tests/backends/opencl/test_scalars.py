"""Scalar arguments on the launch path: PyOpenCL's C++ packer and the struct fallback agree."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

from cubeplug import Buffer, Kernel, Scalar, ValidationError
from cubeplug.backends.opencl import compiler
from tests.backends.opencl.conftest import make_client, requires_opencl

pytestmark = requires_opencl

SRC = (
    "KERNEL scalar_mix(GLOBAL long* out, float a, unsigned int b, long c, uchar d) "
    "{ out[0] = (long)(a * 4.0f); out[1] = (long)b; out[2] = c; out[3] = (long)d; }"
)
MIX = Kernel(
    "scalar_mix",
    [Buffer("out", "i64"), Scalar("a", "f32"), Scalar("b", "u32"), Scalar("c", "i64"), Scalar("d", "bool")],
    {"c": SRC},
)
VALUES: list[Any] = [2.25, 4_000_000_000, -(2**40), True]
EXPECTED = [9, 4_000_000_000, -(2**40), 1]


@pytest.mark.parametrize("path", ["pyopencl", "struct"])
def test_scalars_reach_the_kernel_through_either_packer(monkeypatch: pytest.MonkeyPatch, path: str) -> None:
    if path == "struct":  # no dtype packed by PyOpenCL: every kernel takes the Python fallback
        monkeypatch.setattr(compiler, "_PACK_CODES", {})
    client = make_client()
    try:
        out = client.empty(32)
        client.launch(MIX, 1, [out], VALUES)
        client.launch_unchecked(MIX, 1, [out], VALUES)
        assert client.to_numpy(out, "i64").tolist() == EXPECTED
        client.launch(MIX, 1, [out], [np.float32(0.5), np.uint32(3), np.int64(-1), np.bool_(False)])
        assert client.to_numpy(out, "i64").tolist() == [2, 3, -1, 0]
    finally:
        client.close()


def test_an_unchecked_scalar_of_the_wrong_kind_is_a_validation_error() -> None:
    client = make_client()
    try:
        out = client.create(np.full(4, 7, np.int64))
        with pytest.raises(ValidationError, match="kernel .scalar_mix. scalars"):
            client.launch_unchecked(MIX, 1, [out], ["x", 1, 1, True])
        with pytest.raises(ValidationError, match="kernel .scalar_mix. scalars"):
            client.launch_unchecked(MIX, 1, [out], [1.0, 1])
        for _ in range(2):  # an array where a number goes: refused, every time
            with pytest.raises(ValidationError, match="kernel .scalar_mix. scalars"):
                client.launch_unchecked(MIX, 1, [out], [np.ones(3), 1, 1, True])
        client.launch(MIX, 1, [out], VALUES)  # the client keeps working
        assert client.to_numpy(out, "i64").tolist() == EXPECTED
    finally:
        client.close()


RECIP = Kernel(
    "recip",
    [Buffer("out", "f32"), Scalar("a", "f32"), Scalar("i", "u32")],
    {"c": "KERNEL recip(GLOBAL float* out, float a, unsigned int i) { out[i] = 1.0f / a; }"},
)


def test_scalars_equal_to_the_last_launch_are_kept_and_changes_reach_the_kernel() -> None:
    client = make_client()
    try:
        out = client.create(np.zeros(4, np.float32))
        args = [2.0, 0]
        client.launch(RECIP, 1, [out], args)
        prog = client.launcher.compiled_for(RECIP).program
        assert prog.last_scalars == [2.0, 0]
        args[0] = 4.0  # the caller's list changes after the launch: the next launch sees the change
        client.launch(RECIP, 1, [out], (4.0, 1))
        client.launch(RECIP, 1, [out], [4.0, 1])  # equal values: not set again
        client.launch(RECIP, 1, [out], [*args[:1], 2])
        client.launch(RECIP, 1, [out], [0.0, 3])
        assert client.to_numpy(out, "f32").tolist() == [0.5, 0.25, 0.25, np.inf]
        client.launch(RECIP, 1, [out], [-0.0, 3])  # equal to 0.0, other bits: set again
        assert client.to_numpy(out, "f32").tolist()[3] == -np.inf
        client.launch(RECIP, 1, [out], [0.0, 3])
        assert client.to_numpy(out, "f32").tolist()[3] == np.inf
    finally:
        client.close()


def test_after_a_failed_scalar_set_the_next_launch_gets_its_own_values() -> None:
    client = make_client()
    try:
        out = client.create(np.zeros(4, np.float32))
        client.launch(RECIP, 1, [out], [2.0, 1])
        with pytest.raises(ValidationError, match="kernel .recip. scalars"):
            client.launch_unchecked(RECIP, 1, [out], [8.0, -1])  # -1 does not pack as u32
        client.launch(RECIP, 1, [out], [2.0, 1])  # the values of the launch before: set again
        assert client.to_numpy(out, "f32").tolist() == [0.0, 0.5, 0.0, 0.0]
    finally:
        client.close()
