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
        client.launch(MIX, 1, [out], VALUES)  # the client keeps working
        assert client.to_numpy(out, "i64").tolist() == EXPECTED
    finally:
        client.close()
